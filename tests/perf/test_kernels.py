"""Measured kernel tables: the package's copy is the raw results, measured shapes come back
exactly, and shapes outside the measured range fall back to the calibrated curve."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from memtune.catalog.gpus import get_gpu
from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.perf import constants as K
from memtune.perf.kernels import (
    ELEMENTWISE_TRACES,
    TABLES,
    SizeCurve,
    attention_fractions,
    eager_kernels,
    fp8_gemm_fraction,
    gemm_fraction,
    tables_of,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "gpu" / "results"
MEASURED = sorted(TABLES)  # "H100-80GB", "H200"


@pytest.mark.parametrize(
    "name", sorted(n for files in (*TABLES.values(), *ELEMENTWISE_TRACES.values()) for n in files)
)
def test_packaged_table_is_the_raw_measurement(name: str) -> None:
    packaged = resources.files("memtune.perf").joinpath("data", name).read_bytes()
    assert packaged == (RESULTS / name).read_bytes()


def test_a_gpu_takes_its_own_tables_where_it_has_some() -> None:
    assert tables_of("H100-80GB") == "H100-80GB"
    assert tables_of("H200") == "H200"
    assert tables_of("B200") == "H200"  # none of its own: the reference's fractions
    assert TABLES["H100-80GB"] == ("gemm-h100.json", "kernels-h100.json")
    assert json.loads((RESULTS / "kernels-h100.json").read_text())["device"] == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("on", MEASURED)
def test_a_measured_fp8_shape_returns_its_measurement(on: str) -> None:
    raw = json.loads((RESULTS / TABLES[on][1]).read_text())
    first = raw["gemm"]["fp8_tensorwise"][0]  # llama3-8b tp1 qkv: 1024 x 6144 x 4096
    peak = get_gpu(on).fp8_tflops
    assert fp8_gemm_fraction(on, first["m"], first["n"], first["k"]) == pytest.approx(first["tflops"] / peak)
    # blockwise scaling reads its own table
    block = raw["gemm_fp8_blockwise"]["shapes"][0]
    assert (block["m"], block["n"], block["k"]) == (first["m"], first["n"], first["k"])
    assert block["tflops"] < first["tflops"]
    assert fp8_gemm_fraction(on, block["m"], block["n"], block["k"], "blockwise") == pytest.approx(
        block["tflops"] / peak
    )


@pytest.mark.parametrize("on", MEASURED)
def test_the_blockwise_table_was_checked_against_a_dequantized_product(on: str) -> None:
    raw = json.loads((RESULTS / TABLES[on][1]).read_text())
    # block scales read one per 1x128 / 128x128 block: fp32 output within rounding of the reference
    assert raw["gemm_fp8_blockwise"]["check_relative_error"] < 1e-3


@pytest.mark.parametrize("on", MEASURED)
def test_a_measured_shape_returns_its_measurement(on: str) -> None:
    raw = json.loads((RESULTS / TABLES[on][0]).read_text())
    later = json.loads((RESULTS / TABLES[on][1]).read_text())
    first = raw["gemm"][0]  # llama3-8b tp1 qkv: 4096 x 6144 x 4096
    peak = get_gpu(on).bf16_tflops
    # timed in both tables: their mean; a shape only the later one has (M 1,024): its own
    again = next(
        g for g in later["gemm"]["bf16"] if (g["m"], g["n"], g["k"]) == (first["m"], first["n"], first["k"])
    )
    mean = (first["tflops"] + again["tflops"]) / 2
    small = later["gemm"]["bf16"][0]  # llama3-8b tp1 qkv at 1,024 tokens
    assert small["m"] == 1024 and (small["n"], small["k"]) == (first["n"], first["k"])
    assert gemm_fraction(on, small["m"], small["n"], small["k"]) == pytest.approx(small["tflops"] / peak)
    # 4,096 rows: their measurement, or the 1,024 rows' rate where that is higher (rows never slow)
    best = max(mean, small["tflops"])
    assert gemm_fraction(on, first["m"], first["n"], first["k"]) == pytest.approx(best / peak)
    att = raw["attention"][0]
    fwd, bwd = attention_fractions(on, att["seq"], att["heads"] * att["batch"])
    assert (fwd, bwd) == pytest.approx((att["fwd_tflops"] / peak, att["bwd_tflops"] / peak))


def test_more_rows_never_price_a_gemm_slower_per_flop() -> None:
    """The H200's back-to-back table times 4,096 x 14,336 GEMMs (N x K) at 699.0 TFLOP/s with 1,024
    rows, at 686.4 and 708.0 (a mean of 697.2) with 4,096 and at 601.9 with 8,192
    (kernels-h200.json, gemm-h200.json): 4,096 and 8,192 rows take 1,024's 699.0."""
    peak = get_gpu("H200").bf16_tflops
    assert gemm_fraction("H200", 4096, 4096, 14336) == pytest.approx(699.0 / peak, rel=1e-3)
    assert gemm_fraction("H200", 8192, 4096, 14336) == pytest.approx(gemm_fraction("H200", 4096, 4096, 14336))
    for n, k in ((4096, 14336), (28672, 4096), (6144, 4096), (4096, 4096)):
        rates = [gemm_fraction("H200", m, n, k) for m in (1024, 4096, 8192, 16384)]  # the measured rows
        assert rates == sorted(rates)


def test_outside_the_measured_range_the_curve_applies() -> None:
    # 16 x 16 x 16 lies far below the smallest measured side (128): the half-size curve.
    h = K.GEMM_HALF_SIZE
    assert gemm_fraction("H200", 16, 16, 16) == pytest.approx(K.GEMM_PEAK_FRACTION / (1 + 3 * h / 16))


def test_interpolation_stays_between_neighbours() -> None:
    # Halfway (in log2) between measured rows 4096 and 8192 of one shape family.
    low, high = gemm_fraction("H200", 4096, 6144, 4096), gemm_fraction("H200", 8192, 6144, 4096)
    assert min(low, high) * 0.9 <= gemm_fraction("H200", 5793, 6144, 4096) <= max(low, high) * 1.1


def test_a_size_curve_interpolates_floors_and_extends_its_last_rate() -> None:
    curve = SizeCurve.of([(1.0, 1.0), (3.0, 5.0), (3.0, 7.0)])  # two samples of one size averaged
    assert curve.points == ((1.0, 1.0), (3.0, 6.0))
    assert curve.seconds(2.0) == 3.5
    assert curve.seconds(0.5) == 1.0  # a kernel is no faster than its launch
    assert curve.seconds(5.0) == 11.0  # the last segment's 2.5 per element


@pytest.mark.parametrize("on", MEASURED)
def test_eager_tables_return_their_measurements(on: str) -> None:
    raw = json.loads((RESULTS / TABLES[on][1]).read_text(encoding="utf-8"))
    kernels = eager_kernels(on)
    ce = raw["cross_entropy"][1]
    assert kernels.cross_entropy.seconds(ce["tokens"] * ce["vocab"]) == pytest.approx(ce["plain_ms"] / 1e3)
    if on in ELEMENTWISE_TRACES:  # the traced kernels' time, the passes averaged
        traced = [
            e["kernel_ms"]
            for name in ELEMENTWISE_TRACES[on]
            for e in json.loads((RESULTS / name).read_text(encoding="utf-8"))["elementwise"]
            if e["name"] == "rmsnorm bwd" and e["tokens"] == 4096 and e["hidden"] == 4096
        ]
        assert len(traced) == 2
        norm_ms = sum(traced) / 2
    else:
        norm_ms = next(
            e["ms"]
            for e in raw["elementwise"]
            if e["name"] == "rmsnorm bwd" and e["tokens"] == 4096 and e["hidden"] == 4096
        )
    assert kernels.elementwise["rmsnorm bwd"].seconds(4096 * 4096) == pytest.approx(norm_ms / 1e3)
    foreach = [o["params_per_s"] for o in raw["optimizer"] if o["impl"] == "foreach"]
    assert kernels.adam_params_per_s["foreach"] == min(foreach)


@pytest.mark.parametrize(
    "gpu, event_above, traced_us, norm_fwd_us",
    [("H200", 90e-6, (8e-6, 10e-6), 23.3e-6), ("H100-80GB", 60e-6, (8e-6, 10e-6), 28.1e-6)],
)
def test_a_traced_eager_kernel_is_priced_at_its_gpu_time_not_its_launches(
    gpu: str, event_above: float, traced_us: tuple[float, float], norm_fwd_us: float
) -> None:
    """At 2 M elements the event-timed RMSNorm backward (the later file's: 94.6 us on the H200,
    66.7 us on the H100) is the host's launches of autograd's call; its kernels take about 9 us
    in the traces of both, not far above the 1.7 us (H200) and 2.5 us (H100) that moving 8 MB
    at HBM speed needs. From 16 M elements the two timings agree for the forward kernels."""
    raw = json.loads((RESULTS / TABLES[gpu][1]).read_text(encoding="utf-8"))
    event_bwd = next(
        e["ms"] / 1e3
        for e in raw["elementwise"]
        if e["name"] == "rmsnorm bwd" and (e["tokens"], e["hidden"]) == (1024, 2048)
    )
    curves = eager_kernels(gpu).elementwise
    assert event_bwd > event_above
    assert traced_us[0] < curves["rmsnorm bwd"].seconds(1024 * 2048) < traced_us[1]
    assert curves["rmsnorm fwd"].seconds(4096 * 4096) == pytest.approx(norm_fwd_us, rel=0.01)
    assert curves["rmsnorm bwd"].seconds(1024 * 2048) < event_bwd / 5


def test_each_fp8_recipe_names_the_scaling_its_gemms_run_with() -> None:
    from memtune.config.derived import derive
    from tests.check.check_fixtures import make_job

    def scaling(*overrides: str) -> str | None:
        return derive(make_job("model.transformer_impl=transformer_engine", *overrides)).fp8_gemm_scaling

    assert scaling() is None
    assert scaling("model.fp8=hybrid", "model.fp8_recipe=delayed") == "tensorwise"
    assert scaling("model.fp8=hybrid", "model.fp8_recipe=tensorwise") == "tensorwise"
    assert scaling("model.fp8=hybrid", "model.fp8_recipe=blockwise") == "blockwise"
    assert scaling("model.fp8=e4m3", "model.fp8_recipe=mxfp8") == "tensorwise"  # no H200 kernel


def test_a_gpu_with_published_square_gemms_scales_the_reference_fractions_by_them() -> None:
    # pytorch/ao #2427 timed torch.bfloat16 square GEMMs on a B200 (2,250 TFLOP/s dense peak):
    # 4,096^3 at 1,410 TFLOP/s is 0.627 of the peak where the H200's table gives 0.700 there
    from statistics import median

    from memtune.catalog.gpus import get_gpu
    from memtune.config.derived import derive
    from memtune.perf.kernels import published_gemm_scale
    from memtune.perf.layer import ShapePricer
    from tests.check.check_fixtures import make_job

    published = {2048: 1130, 3072: 1510, 4096: 1410, 6144: 1450, 8192: 1420}
    ratios = [t / 2250 / gemm_fraction("H200", s, s, s) for s, t in published.items()]
    scale = published_gemm_scale("B200")
    assert scale == pytest.approx(median(ratios))
    assert 0.88 < scale < 0.95  # the B200 reaches a little less of its peak than the H200 of its own
    assert published_gemm_scale("GB200") is None and published_gemm_scale("H200") is None

    d = derive(make_job())
    pricer = ShapePricer(d, get_gpu("B200"), K.MEGATRON_LM_LOOP)
    m, n, k = 4096, 6144, 4096
    expected = 2 * m * n * k / (2250e12 * gemm_fraction("H200", m, n, k) * scale)
    assert pricer.gemm(m, n, k) == pytest.approx(expected)
    assert f"B200 bf16 GEMMs at {scale:.2f} of the H200's fractions (published square GEMMs, gpus.yaml)" in (
        pricer.unmeasured
    )


def test_blackwell_kernels_in_a_step_take_the_fitted_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    # B200 and GB200 have no kernel tables: a layer's kernels are the H200's fractions of their
    # peak, times BLACKWELL_KERNEL_FACTOR (fitted on published whole steps); the H200 is untouched
    from memtune.catalog.gpus import get_gpu
    from memtune.config.derived import derive
    from memtune.perf.layer import ShapePricer
    from tests.check.check_fixtures import make_job

    d = derive(make_job())

    def layer(gpu: str) -> tuple[float, float, set[str]]:
        pricer = ShapePricer(d, get_gpu(gpu), K.MEGATRON_LM_LOOP)
        lt = pricer.layer(False)
        return lt.fwd, lt.bwd, pricer.unmeasured

    fitted = {gpu: layer(gpu) for gpu in ("B200", "GB200", "H200")}
    monkeypatch.setattr(K, "BLACKWELL_KERNEL_FACTOR", {"B200": 1.0, "GB200": 1.0})
    for gpu in ("B200", "GB200"):
        fwd, bwd, notes = fitted[gpu]
        plain_fwd, plain_bwd, _ = layer(gpu)
        assert (fwd / plain_fwd, bwd / plain_bwd) == pytest.approx((1.22, 1.22))
        note = f"{gpu} kernels at 1.22x that price (fitted on published whole steps, constants.BLACKWELL_KERNEL_FACTOR)"
        assert note in notes
    assert fitted["H200"][:2] == layer("H200")[:2]


def test_the_blackwell_factor_is_what_its_fit_gives() -> None:
    import runpy
    from pathlib import Path
    from statistics import median

    script = runpy.run_path(
        str(Path(__file__).resolve().parents[2] / "benchmarks" / "fit_blackwell_kernels.py")
    )
    # one factor per generation, each the grid's first at which its runs' median error is not positive
    for generation, gpus, count, factor in (
        ("Blackwell", {"B200", "GB200"}, 49, 1.22),
        ("Blackwell Ultra", {"GB300"}, 21, 1.08),  # no dense B300 run: the B300 takes the GB300's
    ):
        runs = script["dense_blackwell_runs"](generation)
        assert {gpu for gpu, _ in runs} == gpus and len(runs) == count
        below = round(factor - 0.01, 2)
        assert (
            median(e for _, e in script["errors"](runs, factor))
            <= 0
            < median(e for _, e in script["errors"](runs, below))
        )
    assert K.BLACKWELL_KERNEL_FACTOR == {"B200": 1.22, "GB200": 1.22, "B300": 1.08, "GB300": 1.08}


def test_the_collective_launch_is_its_fits_choice_among_its_grid_neighbours() -> None:
    import runpy
    from pathlib import Path

    script = runpy.run_path(
        str(Path(__file__).resolve().parents[2] / "benchmarks" / "fit_collective_launch.py")
    )
    committed = K.COLLECTIVE_LAUNCH_S
    assert committed in script["GRID"]
    # the rule: the smallest sum of the three tune medians (the whole grid: the script itself)
    sums = {v: sum(script["medians"](v)) for v in (committed - 10e-6, committed, committed + 10e-6)}
    assert min(sums, key=lambda v: sums[v]) == committed


def test_a_lora_adapter_costs_its_launches_or_its_bytes_at_the_measured_rate() -> None:
    from memtune.perf.kernels import lora_adapter_cost

    cost = lora_adapter_cost("H100-80GB")
    # From the H100's table: the median forward at 128 tokens is 68.8 us, and the forwards past
    # twice that move rows x (in + 2 out) bf16 elements at 1.54 TB/s.
    assert cost.floor_s == pytest.approx(68.8e-6, rel=0.01)
    assert cost.bytes_per_s == pytest.approx(1.536e12, rel=0.01)
    # Llama 3 8B's linear_fc1 adapter at TP 1 and 8,192 tokens: 8,192 x (4,096 + 2 x 28,672) x 2
    # bytes = 1.007 GB, 0.656 ms (measured: 0.678); a 128-token adapter costs its launches.
    assert cost.seconds(8192, 4096 + 2 * 28672) == pytest.approx(1.007e9 / cost.bytes_per_s, rel=0.01)
    assert cost.seconds(8192, 4096 + 2 * 28672) == pytest.approx(0.678e-3, rel=0.05)
    assert cost.seconds(128, 4096 + 2 * 6144) == cost.floor_s
    assert cost.seconds(8192, 4096 + 2 * 28672, dropout=True) == pytest.approx(
        cost.dropout_factor * cost.seconds(8192, 4096 + 2 * 28672)
    )
    assert 1.3 < cost.dropout_factor < 1.6


@pytest.mark.parametrize("on", MEASURED)
def test_a_small_m_shape_is_the_tables_1024_row_point_times_its_measured_ratio(on: str) -> None:
    # Llama 3 70B's TP 8 qkv at 512 rows (a TP chunk of the userbuffer overlap at 4,096 tokens):
    # each pass of gemm-small-m-h100.json timed it beside 1,024 rows; the table's own 1,024-row
    # point times the mean of the two passes' ratios
    raw = json.loads((RESULTS / "gemm-small-m-h100.json").read_text())
    packaged = resources.files("memtune.perf").joinpath("data", "gemm-small-m-h100.json").read_bytes()
    assert packaged == (RESULTS / "gemm-small-m-h100.json").read_bytes()
    n, k = 1280, 8192
    for kind, fraction in (("fp8_tensorwise", fp8_gemm_fraction), ("bf16", gemm_fraction)):
        ratios = []
        for one in raw["passes"]:
            rows = {g["m"]: g["tflops"] for g in one[kind] if (g["n"], g["k"]) == (n, k)}
            ratios.append(rows[512] / rows[1024])
        assert len(ratios) == 2
        expected = fraction(on, 1024, n, k) * sum(ratios) / 2
        assert fraction(on, 512, n, k) == pytest.approx(expected)
    # the FP8 chunk runs at about half the 1,024-row rate: 128-row tiles leave most SMs idle
    assert fp8_gemm_fraction(on, 512, n, k) < 0.6 * fp8_gemm_fraction(on, 1024, n, k)


def test_gemms_under_1024_rows_say_where_their_ratios_come_from() -> None:
    # TE's userbuffer overlap at TP 8 and 4,096 tokens runs 512-row chunks: on the H100, whose
    # ratios were timed, nothing to say; on the H200 (the H100's ratios) and the B200 (the H200's
    # tables) the prediction says so; at TP 2 the chunks are 2,048 rows and nothing is said
    from memtune.perf.step import predict_step
    from memtune.plan.query import Query, base_job

    note = "GEMMs under 1,024 rows on {} at the H100's measured ratios"
    for gpu in ("H100-80GB", "H200", "B200"):
        for tp, chunked in ((8, True), (2, False)):
            job = with_changes(
                base_job(Query("llama3-8b", 8, gpu, 8, 4096, 32, "pretrain")),
                [Change.parse(c) for c in (f"model.tensor_model_parallel_size={tp}", "model.sequence_parallel=true",
                                           "model.tp_comm_overlap=true", "train.micro_batch_size=1")],
            )  # fmt: skip
            said = note.format(gpu) in predict_step(gate(job).derived).unmeasured
            assert said == (chunked and gpu != "H100-80GB")


def test_userbuffer_overlap_needs_sequence_parallelism_over_more_than_one_rank() -> None:
    # Derived.userbuffer_overlap: tp_comm_overlap with SP in effect (SP is off at TP 1)
    from memtune.plan.query import Query, base_job

    base = base_job(Query("llama3-8b", 8, "H100-80GB", 8, 4096, 32, "pretrain"))
    for tp, sp, overlap, expected in ((8, "true", "true", True), (1, "true", "true", False),
                                      (8, "false", "true", False), (8, "true", "false", False)):  # fmt: skip
        changes = [f"model.tensor_model_parallel_size={tp}", f"model.sequence_parallel={sp}",
                   f"model.tp_comm_overlap={overlap}"]  # fmt: skip
        d = gate(with_changes(base, [Change.parse(c) for c in changes])).derived
        assert d.userbuffer_overlap == expected


def test_the_flex_dispatchers_host_work_is_what_its_fit_gives() -> None:
    import runpy
    from pathlib import Path
    from statistics import median

    script = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "fit_flex_host.py"))
    runs = script["host_bound_runs"]()
    assert len(runs) == 8
    # the committed value is the 0.1 ms grid's first at which the runs' median error is not positive
    assert median(script["errors"](runs, 1.8e-3)) <= 0 < median(script["errors"](runs, 1.7e-3))
    assert K.MOE_DISPATCHER_HOST_FWD_S["flex"] == 1.8e-3


def test_fp8_attentions_backward_is_what_its_fit_gives() -> None:
    # Unpinned, the constant drifted from its rule (0.61 against 0.55) as the step changed.
    import runpy
    from pathlib import Path
    from statistics import median

    script = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "fit_fp8_attention.py"))
    hopper = [(gpu, one) for gpu, one in script["fp8_attention_runs"]() if gpu in script["HOPPER"]]
    assert len(hopper) == 16
    # the committed factor is the grid's largest (from 1.00 down) at which the median is not negative
    assert (
        median(e for _, e in script["errors"](hopper, 0.69))
        < 0
        <= median(e for _, e in script["errors"](hopper, 0.68))
    )
    assert K.FP8_ATTENTION_BWD_FACTOR == 0.68


def test_the_all_to_all_exchanges_host_work_is_what_its_fit_gives() -> None:
    import runpy
    from pathlib import Path

    script = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "fit_alltoall_host.py"))
    _, entry = script["run"]()
    # the committed value is the 0.1 ms grid's nearest to the published step, within 1%
    assert script["fitted"](entry) == K.MOE_DISPATCHER_HOST_FWD_S["alltoall"] == 2.7e-3
    assert abs(script["error"](entry, 2.7e-3)) < 0.01 < abs(script["error"](entry, 0.0))


def test_the_kernel_class_diagnostic_sorts_kernels_by_name() -> None:
    """benchmarks/kernel_classes.py: flash kernels (whose names carry CUTLASS types) are attention,
    cuBLASLt's nvjet and any gemm kernel are GEMMs, every other kernel is the rest."""
    import runpy
    from pathlib import Path

    script = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "kernel_classes.py"))
    profile = {
        "kernels": [
            {
                "name": "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, cutlass::bfloat16_t>>",
                "us": 300.0,
            },
            {"name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "us": 1000.0},
            {"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "us": 500.0},
            {
                "name": "void at::native::unrolled_elementwise_kernel<at::native::CUDAFunctor_add<float>>",
                "us": 200.0,
            },
            {"name": "Memcpy DtoD (Device -> Device)", "us": 50.0},
        ]
    }
    assert script["measured_classes"](profile) == pytest.approx((1.5e-3, 0.3e-3, 0.25e-3))
