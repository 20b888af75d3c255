"""The report's detectors on recorded series, with expectations worked out by hand."""

from __future__ import annotations

from memtune.runtime import detectors
from memtune.units import GiB, MiB


def mib_series(values: list[float], first_step: int = 1) -> detectors.Series:
    return [(first_step + i, v * MiB) for i, v in enumerate(values)]


def test_growth_names_the_steps_where_the_floor_rose():
    # After the two warm-up steps: 1100 1200 1150 1300 1400 1400 1500 1600 (steps 3..10).
    # Lowest value from each step on: 1100 1150 1150 1300 1400 1400 1500 1600, so the floor
    # rose at steps 4, 6, 7, 9 and 10, by 500 MiB in all.
    series = mib_series([1000, 1100, 1100, 1200, 1150, 1300, 1400, 1400, 1500, 1600])
    found = detectors.growth(series)
    assert found == detectors.Growth(3, 10, 1100 * MiB, 1600 * MiB, (4, 6, 7, 9, 10))
    assert found.grown_bytes == 500 * MiB


def test_growth_ignores_a_spike_that_is_given_back():
    values = [1000.0] * 10
    values[4] = 3000
    assert detectors.growth(mib_series(values)) is None


def test_growth_ignores_creep_below_the_noise_and_small_totals():
    assert detectors.growth(mib_series([1000 + i for i in range(20)])) is None  # +1 MiB a step
    assert detectors.growth(mib_series([1000, 1000, 1000, 1010, 1020, 1030])) is None  # +30 MiB < 64 MiB


def test_growth_needs_enough_steps_after_the_warmup():
    assert detectors.growth(mib_series([1000, 2000, 3000, 4000, 5000])) is None  # 3 steps after warm-up


def test_resume_jump_compares_medians_of_the_windows():
    before = [(s, 10 * GiB) for s in range(1, 9)]
    after = [(9, 12 * GiB), (10, 12 * GiB), (11, 12 * GiB), (12, 12 * GiB), (13, 13 * GiB)]
    jump = detectors.resume_jump(before, after, 9)
    assert jump == detectors.Jump(9, 10 * GiB, 12 * GiB)
    assert jump.jump_bytes == 2 * GiB


def test_resume_jump_needs_both_thresholds():
    before = [(s, 10 * GiB) for s in range(1, 9)]
    after = [(s, 10.3 * GiB) for s in range(9, 14)]  # +307 MiB but only 3 %
    assert detectors.resume_jump(before, after, 9) is None
    assert detectors.resume_jump([], after, 9) is None


def test_counter_rises_after_the_warmup_and_across_a_restart():
    assert detectors.counter_rises([(1, 0), (2, 1), (3, 1), (4, 2), (5, 2), (6, 5)]) == (4, 6)
    # The counter restarting at 0 (a new process) is a new baseline, not a rise.
    assert detectors.counter_rises([(1, 0), (2, 0), (3, 3), (4, 0), (5, 1)]) == (3, 5)


def test_outlier_against_the_median_of_its_peers():
    peaks = {0: 10 * GiB, 1: 10 * GiB, 2: 10 * GiB, 3: 12 * GiB}
    assert detectors.outliers(peaks, {}) == [detectors.Outlier(3, 12 * GiB, 10 * GiB, (0, 1, 2))]


def test_outliers_compare_within_a_pipeline_stage():
    # Stage 0 holds more activations than stage 1 by design; only rank 3 stands out in its stage.
    peaks = {0: 20 * GiB, 1: 20 * GiB, 2: 10 * GiB, 3: 12 * GiB}
    found = detectors.outliers(peaks, {0: 0, 1: 0, 2: 1, 3: 1})
    assert found == [detectors.Outlier(3, 12 * GiB, 10 * GiB, (2,))]
    assert found[0].excess_bytes == 2 * GiB
