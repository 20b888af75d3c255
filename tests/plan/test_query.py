"""The base job a plan varies."""

from memtune.plan.query import Query, base_job


def test_a_config_keeps_its_own_grad_reduce_overlap(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Issue 23 item 6: the planner's base job is the job as written; only a preset (which has no
    # job) starts with overlap_grad_reduce on.
    config = tmp_path / "job.yaml"
    config.write_text("model: {preset: llama3-8b}\ncluster: {num_gpus: 8}\ntrain: {global_batch_size: 32}\n")
    assert (
        base_job(Query(str(config), 8, None, None, None, None, "pretrain")).ddp.overlap_grad_reduce is False
    )
    assert base_job(Query("llama3-8b", 8, None, None, None, 32, "pretrain")).ddp.overlap_grad_reduce is True
