"""Issue 43 item 9: any ``cluster.network`` section is refused in one line or priced with finite
numbers: a denormal bandwidth used to divide a transfer's time to infinity, and ``--json``
printed ``Infinity``/``NaN``, which is not JSON."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from memtune.errors import InputError
from memtune.limits import MIN_LINK_GB_PER_S
from memtune.output import json_text
from tests.hostile.conftest import FIXTURE_SETTINGS, assert_well_behaved, run_cli

JOB = {
    "model": {"preset": "llama3-8b", "tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 2},
    "train": {"micro_batch_size": 1, "global_batch_size": 16},
    "cluster": {"num_gpus": 16, "gpus_per_node": 8},
}
BANDWIDTHS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [5e-324, 2.2e-308, 1e-300, 1e-9, MIN_LINK_GB_PER_S, 0.0, -0.0, -1.0, 1e6, 1e6 + 1, 1e308]
    ),
    st.integers(-(2**70), 2**70),
    st.sampled_from([True, None, "400", "", [400], {"x": 1}]),
)
COUNTS = st.one_of(st.integers(-3, 80), st.sampled_from([10**7, 2**63, 1.5, True, None, "8"]))
NETWORKS = st.fixed_dictionaries(
    {},
    optional={
        "system": st.one_of(
            st.sampled_from(["dgx-h100", "gb200-nvl72", "", "nope", "x" * 500]), st.integers()
        ),
        "gpus_per_nvlink_domain": COUNTS,
        "nvlink_gb_per_s": BANDWIDTHS,
        "nics_per_node": COUNTS,
        "nic_gbit_per_s": BANDWIDTHS,
        "rail_optimized": st.sampled_from([True, False, None, "yes", 1]),
    },
)


def no_constants(name: str) -> None:
    pytest.fail(f"--json printed {name}, which is not JSON")


@FIXTURE_SETTINGS
@given(network=NETWORKS, command=st.sampled_from([("estimate",), ("bench", "step")]))
def test_any_network_section_is_priced_finitely_or_refused_in_one_line(tmp_path, capsys, network, command):
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({**JOB, "cluster": {**JOB["cluster"], "network": network}}))
    status, out, err = run_cli(capsys, *command, str(config), "--json")
    assert_well_behaved(status, err, allowed=(0, 2))
    document = json.loads(out, parse_constant=no_constants)
    if status == 0:
        step = document.get("step_time_s") or (document.get("throughput") or {}).get("step_time_s")
        assert step is None or 0 < step < 1e300


@pytest.mark.parametrize("key", ["nvlink_gb_per_s", "nic_gbit_per_s"])
@pytest.mark.parametrize("value", [5e-324, 1e-300, 0.0009])
def test_a_bandwidth_below_one_megabyte_per_second_is_refused(capsys, tmp_path, key, value):
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({**JOB, "cluster": {**JOB["cluster"], "network": {key: value}}}))
    status, _, err = run_cli(capsys, "estimate", str(config))
    assert (status, err) == (
        2,
        f"memtune estimate: cluster.network.{key}: input should be greater than or equal to 0.001, got {value!r}\n",
    )


def test_the_slowest_network_allowed_plans_with_finite_numbers(capsys, tmp_path):
    network = {"nvlink_gb_per_s": MIN_LINK_GB_PER_S, "nic_gbit_per_s": MIN_LINK_GB_PER_S, "nics_per_node": 1}
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({**JOB, "cluster": {**JOB["cluster"], "network": network}}))
    status, out, err = run_cli(
        capsys, "plan", str(config), "--gpus", "16", "--gbs", "16", "--top", "1", "--json"
    )
    assert (status, err) == (0, "")
    json.loads(out, parse_constant=no_constants)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_result_is_refused_by_name_never_printed(value):
    with pytest.raises(InputError) as refused:
        json_text({"schema_version": 1, "layouts": [{"step_time_s": 1.0}, {"step_time_s": value}]})
    assert refused.value.problems == [
        "--json: layouts[1].step_time_s is not a finite number, which JSON cannot hold; the input is beyond what "
        "memtune can compute (please report it)"
    ]
