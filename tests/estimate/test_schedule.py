from memtune.config import derive
from memtune.estimate.schedule import forward_order, in_flight


def _pp(job_factory, p, m=None, microbatches=8, layers=8):
    job = job_factory(
        model={
            "num_layers": layers,
            "pipeline_model_parallel_size": p,
            "virtual_pipeline_model_parallel_size": m,
            "pipeline_dtype": "bf16",
        },
        train={"micro_batch_size": 1, "global_batch_size": microbatches},
        cluster={"num_gpus": p},
    )
    return derive(job)


def test_1f1b_holds_p_minus_rank_microbatches(job_factory):
    d = _pp(job_factory, 4)
    assert [in_flight(d, r) for r in range(4)] == [{0: 4}, {0: 3}, {0: 2}, {0: 1}]


def test_1f1b_capped_by_the_number_of_microbatches(job_factory):
    d = _pp(job_factory, 4, microbatches=2)
    assert [in_flight(d, r)[0] for r in range(4)] == [2, 2, 2, 1]


def test_interleaved_order_runs_groups_of_p_chunk_by_chunk(job_factory):
    assert forward_order(4, 2, 2)[:6] == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0)]


def test_interleaved_in_flight_per_chunk(job_factory):
    d = _pp(job_factory, 4, m=2)
    # rank 0 warms up 2*(4-1) + (2-1)*4 = 10 forwards: 11 in flight, groups of 4 chunk-0 then chunk-1
    assert in_flight(d, 0) == {0: 7, 1: 4}
    # the last rank warms up (2-1)*4 = 4 forwards: 5 in flight
    assert in_flight(d, 3) == {0: 4, 1: 1}
