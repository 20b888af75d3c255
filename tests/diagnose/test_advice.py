import yaml

from memtune.diagnose import diagnose_text
from tests.diagnose.diagnose_samples import MSG_211_CAPACITY, MSG_211_FRAGMENTATION

BASE = {
    "model": {
        "num_layers": 8,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "vocab_size": 32000,
        "seq_length": 2048,
        "bf16": True,
    },
    "train": {"micro_batch_size": 1, "global_batch_size": 64},
    "cluster": {"num_gpus": 8, "gpus_per_node": 8},
}


def _config(tmp_path, **sections):
    data = {k: dict(v) for k, v in BASE.items()}
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _changes(d):
    return [c for f in d.fixes for c in f.changes]


def test_fragmentation_fix_order_without_config():
    d = diagnose_text(MSG_211_FRAGMENTATION)
    titles = [f.title for f in d.fixes]
    assert d.fixes[0].changes == ("env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",)
    assert d.fixes[0].saves_bytes == 50 << 30  # the stranded memory it can recover
    # Without a config no other change holds for every job: the advice is to give one.
    assert titles[1:] == ["Give the job's config (--config) for the changes that fit it"]
    assert d.fixes[1].changes == () and d.fixes[1].fallback


def test_nccl_ub_never_gets_expandable_segments(tmp_path):
    d = diagnose_text(MSG_211_FRAGMENTATION, config=_config(tmp_path, env={"use_nccl_ub": True}))
    assert not any("expandable_segments:True" in c for c in _changes(d))
    assert d.fixes[0].changes == ("env.PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512",)


def test_cuda_graphs_get_nccl_graph_register_next_to_expandable(tmp_path):
    d = diagnose_text(
        MSG_211_FRAGMENTATION, config=_config(tmp_path, model={"cuda_graph_impl": "transformer_engine"})
    )
    assert d.fixes[0].changes == (
        "env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "env.NCCL_GRAPH_REGISTER=0",
    )


def test_existing_alloc_conf_is_kept(tmp_path):
    d = diagnose_text(
        MSG_211_FRAGMENTATION,
        config=_config(tmp_path, env={"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.8"}),
    )
    assert d.fixes[0].changes == (
        "env.PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.8,expandable_segments:True",
    )


def test_no_cpu_offload_with_pp_and_no_allocator_fix_when_already_expandable(tmp_path):
    path = _config(
        tmp_path,
        model={"pipeline_model_parallel_size": 2},
        env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    )
    d = diagnose_text(MSG_211_CAPACITY, config=path)
    assert d.verdict.expandable.on is True
    changes = _changes(d)
    assert not any("cpu_offloading" in c for c in changes)
    assert not any("PYTORCH_CUDA_ALLOC_CONF" in c for c in changes)
    assert "model.pipeline_model_parallel_size=4" in changes  # 8 layers split over 4 stages
    assert next(f.cost for f in d.fixes if f.title == "4 pipeline stages").startswith("DP 4 → 2")


def test_lora_with_sp_gets_regather_first_and_no_change_that_does_not_help(tmp_path):
    path = _config(
        tmp_path, model={"tensor_model_parallel_size": 2, "sequence_parallel": True}, peft={"dim": 16}
    )
    d = diagnose_text(MSG_211_CAPACITY, config=path)
    titles = [f.title for f in d.fixes]
    assert titles[0] == "Re-gather LoRA adapter inputs under sequence parallelism"
    assert d.fixes[0].changes == ("peft.sequence_parallel_input_regather=true",)
    # With these small activations selective recompute does not lower the estimated peak.
    assert "Selective activation recompute" not in titles
    assert "model.cpu_offloading=true" in _changes(d) and "model.cpu_offloading_num_layers=2" in _changes(d)


def test_lora_without_an_eligible_adapter_gets_no_regather_advice(tmp_path):
    # Only row-parallel adapters: none can re-gather (memtune/peft/model.py), so it is not offered.
    path = _config(
        tmp_path,
        model={"tensor_model_parallel_size": 2, "sequence_parallel": True},
        peft={"dim": 16, "target_modules": ["linear_proj", "linear_fc2"]},
    )
    d = diagnose_text(MSG_211_CAPACITY, config=path)
    assert "Re-gather LoRA adapter inputs under sequence parallelism" not in [f.title for f in d.fixes]


def test_configuration_and_not_oom_advice_never_touch_the_allocator():
    d = diagnose_text(
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 1048576, "
        "Hardware limit: 232448."
    )
    assert [f.title for f in d.fixes] == ["Smaller Triton tiles"]
    d = diagnose_text(
        "ValueError: Currently there is no support for Pipeline parallelism with CPU offloading"
    )
    assert _changes(d) == ["model.cpu_offloading=false"]


def test_savings_come_from_the_estimator(tmp_path):
    from memtune.check import gate
    from memtune.config import load_job
    from memtune.estimate import estimate

    path = _config(tmp_path)
    d = diagnose_text(MSG_211_CAPACITY, config=path)
    distopt = next(f for f in d.fixes if f.title == "Distributed optimizer")
    base = estimate(gate(load_job(path, []).job)).worst.peak_bytes
    changed = estimate(gate(load_job(path, list(distopt.changes)).job)).worst.peak_bytes
    assert distopt.saves_bytes == base - changed > 0  # optimizer state sharded over DP = 8
    assert distopt.saves_note == "estimated"
    # A capacity OOM is a real shortage: no allocator setting, and only changes that lower the peak.
    assert not any("PYTORCH_CUDA_ALLOC_CONF" in c for c in _changes(d))
    assert all(f.saves_bytes > 0 for f in d.fixes if f.saves_note == "estimated")


def test_capacity_oom_does_not_lead_with_the_allocator():
    d = diagnose_text(MSG_211_CAPACITY)
    assert not any("expandable_segments" in c for c in _changes(d))
    assert [f.title for f in d.fixes] == ["Give the job's config (--config) for the changes that fit it"]


def test_diagnose_quotes_the_saving_fix_quotes_for_the_same_change():
    # Llama 3 70B SFT: with bf16 Adam moments the judged peak moves to the checkpoint load, so the
    # training peak alone would overstate what the change saves (8.46 GiB against 6.16)
    from pathlib import Path

    from memtune.config import load_job
    from memtune.diagnose import diagnose
    from memtune.fix.search import find_fixes

    root = Path(__file__).resolve().parents[2]
    loaded = load_job(root / "examples" / "llama3-70b-sft.yaml")
    log = root / "tests" / "diagnose" / "fixtures" / "h200" / "capacity.log"
    advice = diagnose([str(log)], config=loaded).fixes
    moments = next(f for f in advice if f.title.startswith("Adam moments in bf16"))
    fixed = find_fixes(loaded.job, headroom=20 << 30)
    same = next(
        t
        for t in fixed.suggestions + fixed.not_chosen
        if [str(c) for c in t.changes] == list(moments.changes)
    )
    assert moments.saves_bytes == same.saved_bytes
    assert round(moments.saves_bytes / 2**30, 2) == 6.16
