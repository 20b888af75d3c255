"""What Transformer Engine's fused attention keeps for its backward in an FP8 job, with and
without FP8 attention (TransformerEngine d0067d0 ``FusedAttnFunc.forward``), counted by hand."""

import pytest

from memtune.config import derive
from memtune.estimate import activations as act
from memtune.estimate.flavour import flavour_of

# TINY (tests/estimate/conftest.py) on Transformer Engine's layers: seq 128, mbs 2, TP 1, 4 query
# heads and 2 key-value groups of 16 channels.
TOKENS = 2 * 128
Q = TOKENS * 4 * 16  # elements of q and of the output
KV = TOKENS * 2 * 16  # elements of k, and of v
TE = {"transformer_impl": "transformer_engine", "attention_backend": "auto"}
FP8 = {**TE, "fp8": "hybrid"}


def _kept(job_factory, **model):
    d = derive(job_factory(model=model))
    saved = act.attention(d, act.dims_of(d), flavour_of(d), recompute_core="core_attn" in d.recompute_modules)
    return {k: v for k, v in saved.tensors.items() if k.startswith(("core_attention.", "linear_proj."))}


def test_bf16_attention_keeps_q_k_v_and_hands_its_output_to_linear_proj(job_factory):
    kept = _kept(job_factory, **TE)
    assert (
        kept["core_attention.q"] == 2 * Q and kept["core_attention.k"] == kept["core_attention.v"] == 2 * KV
    )
    # the bf16 projection keeps a view of the attention's output: counted once
    assert "core_attention.output" not in kept and kept["linear_proj.input"] == 2 * Q


def test_fp8_gemms_keep_the_attention_output_twice(job_factory):
    """linear_proj's FP8 GEMM keeps an FP8 copy of its input; the bf16 output the fused
    attention keeps for its own backward stays beside it."""
    kept = _kept(job_factory, **FP8)
    assert kept["linear_proj.input"] == Q and kept["core_attention.output"] == 2 * Q
    assert kept["core_attention.q"] == 2 * Q


@pytest.mark.parametrize(("recipe", "gpu", "output"), [("delayed", "H200", 1), ("tensorwise", "B200", 2)])
def test_fp8_attention_keeps_fp8_q_k_v(job_factory, recipe, gpu, output):
    """FP8 copies of q, k and v (1 byte); the output in FP8 under delayed scaling, in bf16 under
    current scaling (NVTE_DPA_FP8CS_O_in_F16 defaults to 1)."""
    job = job_factory(
        model={**FP8, "fp8_recipe": recipe, "fp8_dot_product_attention": True}, cluster={"gpu": gpu}
    )
    d = derive(job)
    assert d.fp8_attention
    saved = act.attention(d, act.dims_of(d), flavour_of(d), recompute_core=False).tensors
    assert saved["core_attention.q"] == Q and saved["core_attention.k"] == saved["core_attention.v"] == KV
    assert saved["core_attention.output"] == output * Q
    assert saved["linear_proj.input"] == Q


@pytest.mark.parametrize(
    "model",
    [
        {**TE, "fp8_dot_product_attention": True},  # no FP8 at all
        {**FP8, "fp8_recipe": "blockwise", "fp8_dot_product_attention": True},  # built without fp8_dpa
        {**FP8, "fp8_dot_product_attention": True, "attention_backend": "flash"},  # not cuDNN's kernel
    ],
    ids=["bf16", "blockwise", "flash"],
)
def test_fp8_attention_needs_fp8_a_recipe_that_takes_it_and_the_fused_kernel(job_factory, model):
    assert not derive(job_factory(model=model)).fp8_attention


def test_core_attn_recompute_keeps_no_output(job_factory):
    model = {**FP8, "recompute_granularity": "selective", "recompute_modules": ["core_attn"]}
    assert derive(job_factory(model=model)).attention_saved_output_bytes == 0


@pytest.mark.parametrize(
    ("env", "te", "recipe"),
    [
        (None, "2.18.0", "tensorwise"),
        ("DelayedScaling", "2.18.0", "delayed"),
        ("F16", "2.18.0", None),
        ("DelayedScaling", "2.7.0", "tensorwise"),  # before TE 2.8 the variable is not read
    ],
)
def test_the_attention_takes_its_own_recipe_from_nvte_dpa_fp8_recipe(job_factory, env, te, recipe):
    job = job_factory(
        model={**FP8, "fp8_recipe": "tensorwise", "fp8_dot_product_attention": True},
        env={"NVTE_DPA_FP8_RECIPE": env, "transformer_engine_version": te},
    )
    assert derive(job).attention_fp8_recipe == recipe


@pytest.mark.parametrize(
    ("model", "said"),
    [
        (
            {**FP8, "fp8_dot_product_attention": True},
            "FP8 attention keeps q, k and v in FP8 and its output in FP8",
        ),
        (FP8, "as does attention, which keeps its bf16 output beside linear_proj's FP8 copy"),
    ],
    ids=["fp8 attention", "bf16 attention"],
)
def test_explain_says_what_the_attention_keeps_in_an_fp8_job(job_factory, model, said):
    from memtune.check import gate
    from memtune.estimate import estimate
    from memtune.estimate.render import flavour_notes

    notes = flavour_notes(estimate(gate(job_factory(model=model))))
    assert any(said in note for note in notes)


@pytest.mark.parametrize(("te", "needs"), [("2.7.0", False), ("2.8.0", True)])
def test_current_scaling_attention_is_blackwells_only_from_te_2_8(job_factory, te, needs):
    """TE 2.8 (25252e9f2) keeps current-scaling FP8 attention to compute capability 10.0; HPE's
    MLPerf H200 run on a 2.8.0.dev build from before it ran so on Hopper."""
    job = job_factory(
        model={**FP8, "fp8_recipe": "tensorwise", "fp8_dot_product_attention": True},
        env={"transformer_engine_version": te},
    )
    assert derive(job).fp8_attention_needs_blackwell is needs
