"""The LoRA model (memtune/peft/model.py): adapters, shapes, eligibility and savings by hand."""

import ast
import subprocess
import sys
from pathlib import Path

from memtune.check import gate
from memtune.config import derive
from memtune.estimate import estimate
from memtune.peft import model as lm
from tests.check.check_fixtures import make_job

ROOT = Path(__file__).resolve().parents[2]
LORA = "peft.dim=32"


def test_model_imports_only_config():
    tree = ast.parse((ROOT / "memtune/peft/model.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    memtune = {m for m in imported if m and m.startswith("memtune")}
    assert memtune and all(m.startswith("memtune.config") for m in memtune)


def test_importing_memtune_peft_does_not_import_torch():
    code = "import sys, memtune.peft, memtune.peft.model; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_dense_shapes_follow_bridge_placement():
    d = derive(make_job("peft.dim=16"))
    m, tp = d.model, d.tp
    by_target = {a.target: a for a in lm.adapters(d)}
    qkv_out = (m.num_attention_heads + 2 * d.num_query_groups) * d.kv_channels
    assert by_target["linear_qkv"].a_shape == (16 // tp, m.hidden_size)
    assert by_target["linear_qkv"].b_shape == (qkv_out // tp, 16)
    assert by_target["linear_proj"].a_shape == (16, m.num_attention_heads * d.kv_channels // tp)
    assert by_target["linear_proj"].b_shape == (m.hidden_size // tp, 16)
    assert by_target["linear_fc2"].a_shape == (16, d.ffn_hidden_size // tp)


def test_moe_layers_have_routed_and_shared_expert_adapters():
    d = derive(
        make_job(
            LORA,
            "model.num_moe_experts=8",
            "model.add_bias_linear=false",
            "model.moe_shared_expert_intermediate_size=1024",
            "model.expert_model_parallel_size=2",
            "cluster.num_gpus=16",
        )
    )
    moe = {a.label: a for a in lm.adapters_in_layer(d, True)}
    routed = moe["linear_fc1 (routed experts)"]
    assert routed.copies == 8 // 2 and routed.is_expert and routed.regather_blocker == lm.EXPERT
    shared = moe["linear_fc1 (shared experts)"]
    assert not shared.is_expert and shared.regather_blocker is None
    assert shared.a_shape == (32 // d.tp, d.model.hidden_size)


def test_grouped_gemm_shares_one_adapter_with_te_and_has_none_without():
    moe = (LORA, "model.num_moe_experts=8", "model.add_bias_linear=false", "model.moe_grouped_gemm=true")
    te = derive(make_job(*moe, "model.transformer_impl=transformer_engine"))
    local = derive(make_job(*moe, "model.transformer_impl=local"))
    assert [a.copies for a in lm.adapters_in_layer(te, True) if a.is_expert] == [1, 1]
    assert [a for a in lm.adapters_in_layer(local, True) if a.is_expert] == []


def test_saving_is_the_gathered_input_less_the_shard():
    # 2 bytes * (8192 / CP 2) * mbs 2 * hidden 4096 * (1 - 1/TP 2) = 32 MiB per eligible adapter per microbatch.
    d = derive(
        make_job(LORA, "model.context_parallel_size=2", "train.micro_batch_size=2", "cluster.num_gpus=16")
    )
    qkv = next(a for a in lm.adapters(d) if a.target == "linear_qkv")
    assert lm.regather_saving_bytes(d, qkv) == 32 * 2**20
    proj = next(a for a in lm.adapters(d) if a.target == "linear_proj")
    assert lm.regather_saving_bytes(d, proj) == 0
    assert lm.regather_buffer_bytes(d) == 0
    on = derive(make_job(LORA, "peft.sequence_parallel_input_regather=true"))
    assert lm.regather_buffer_bytes(on) == 2 * 8192 * 4096


def test_estimator_prices_exactly_the_models_saving_and_buffer():
    # Peak difference of a rank = saving per adapter x adapters x layers x microbatches in flight - buffer.
    off_job, on_job = make_job(LORA), make_job(LORA, "peft.sequence_parallel_input_regather=true")
    off, on = estimate(gate(off_job)), estimate(gate(on_job))
    d = derive(off_job)
    eligible = [a for a in lm.adapters(d) if a.regather_blocker is None]
    assert [a.target for a in eligible] == ["linear_qkv", "linear_fc1"]
    r_off, r_on = off.ranks[0], on.ranks[0]
    flight = sum(r_off.in_flight.values())
    saving = sum(lm.regather_saving_bytes(d, a) for a in eligible) * r_off.layers * flight
    assert r_off.peak_bytes - r_on.peak_bytes == round(saving - lm.regather_buffer_bytes(derive(on_job)))


def test_blockers_in_order():
    f = lm.RegatherFacts("linear_fc1", "dense", tp=2, sequence_parallel=True)
    assert lm.first_blocker(f) is None
    cases = [
        ({"target": "linear_fc2"}, lm.ROW_PARALLEL),
        ({"tp": 1, "sequence_parallel": False}, lm.TP_IS_ONE),
        ({"sequence_parallel": False}, lm.SP_OFF),
        ({"kind": "routed_expert"}, lm.EXPERT),
        ({"kind": "shared_expert", "shared_expert_overlap": True}, lm.SP_OFF),
        ({"a2a": True, "cpu_activation_offload": True}, lm.A2A),
        ({"cpu_activation_offload": True, "cuda_graphs": True}, lm.CPU_OFFLOAD),
        ({"cuda_graphs": True, "full_recompute": True}, lm.CUDA_GRAPHS),
        ({"full_recompute": True, "mlp_recompute": True}, lm.FULL_RECOMPUTE),
        ({"mlp_recompute": True}, lm.MLP_RECOMPUTE),
    ]
    for change, reason in cases:
        assert lm.first_blocker(lm.RegatherFacts(**{**f.__dict__, **change})) == reason, change
    assert (
        lm.first_blocker(lm.RegatherFacts(**{**f.__dict__, "target": "linear_qkv", "mlp_recompute": True}))
        is None
    )


def test_adapter_collectives_follow_bridge_paths():
    def kinds(*overrides: str) -> dict[str, list[tuple[bool, str, bool]]]:
        d = derive(make_job("peft.dim=16", "model.tensor_model_parallel_size=2", *overrides))
        return {
            a.target: [(c.backward, c.op, c.activation) for c in lm.adapter_collectives(d, a)]
            for a in lm.adapters(d)
        }

    sp = ("model.sequence_parallel=true",)
    te = kinds(*sp, "model.transformer_impl=transformer_engine")
    # TE hands linear_qkv's adapter the layernorm output it has gathered: only LoRA-A's output moves
    assert te["linear_qkv"] == [(False, "all_gather", False), (True, "all_reduce", False)]
    # a row adapter: LoRA-A's partial output reduced, LoRA-B's gathered, the shard's gradient gathered
    assert te["linear_proj"] == [
        (False, "all_reduce", False),
        (True, "all_reduce", False),
        (False, "all_gather", True),
        (True, "all_gather", True),
    ]
    # with the all-to-all path a row adapter's output goes hidden- to sequence-sharded in one
    # exchange each way; without SP there is no sequence shard and nothing changes
    a2a = kinds(*sp, "model.transformer_impl=transformer_engine", "peft.a2a_experimental=true")
    assert a2a["linear_proj"] == [
        (False, "all_reduce", False),
        (True, "all_reduce", False),
        (False, "all_to_all", True),
        (True, "all_to_all", True),
    ]
    assert a2a["linear_qkv"] == te["linear_qkv"]
    no_sp_a2a = kinds("model.sequence_parallel=false", "peft.a2a_experimental=true")
    assert no_sp_a2a["linear_proj"] == kinds("model.sequence_parallel=false")["linear_proj"]
    local = kinds(*sp, "model.transformer_impl=local")
    assert local["linear_qkv"][2:] == [(False, "all_gather", True), (True, "reduce_scatter", True)]
    regather = kinds(
        *sp, "model.transformer_impl=transformer_engine", "peft.sequence_parallel_input_regather=true"
    )
    assert regather["linear_qkv"][2:] == [
        (False, "all_gather", True),
        (True, "all_gather", True),
        (True, "reduce_scatter", True),
    ]
    no_sp = kinds("model.sequence_parallel=false")
    assert no_sp["linear_qkv"][2:] == [(True, "all_reduce", True)]
    assert kinds("model.tensor_model_parallel_size=1")["linear_qkv"] == []


def test_expert_adapters_move_no_activations_of_their_own():
    moe = (
        LORA,
        "model.num_moe_experts=8",
        "model.add_bias_linear=false",
        "model.moe_shared_expert_intermediate_size=1024",
        "model.expert_model_parallel_size=2",
        "model.tensor_model_parallel_size=2",
        "model.sequence_parallel=true",
        "cluster.num_gpus=16",
    )

    def shared_fc1(*more: str) -> list[tuple[bool, str, bool]]:
        d = derive(make_job(*moe, *more))
        by_label = {a.label: a for a in lm.adapters_in_layer(d, True)}
        assert lm.adapter_collectives(d, by_label["linear_fc1 (routed experts)"]) == ()  # the dispatcher's
        return [
            (c.backward, c.op, c.activation)
            for c in lm.adapter_collectives(d, by_label["linear_fc1 (shared experts)"])
        ]

    # a shared expert's fc1 is no layernorm-fused TE linear: its adapter gathers its input itself,
    # unless the shared experts overlap, which hands it the gathered input
    assert (False, "all_gather", True) in shared_fc1("model.transformer_impl=transformer_engine")
    assert not any(c[2] for c in shared_fc1("model.moe_shared_expert_overlap=true"))
