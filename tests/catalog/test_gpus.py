import pytest

from memtune.catalog._data import lookup_key
from memtune.catalog.gpus import capacity_bytes, get_gpu, list_gpus
from memtune.errors import InputError
from memtune.units import GiB as GIB


@pytest.mark.parametrize(
    "name, gib",
    [("H100-80GB", 79.11), ("H200", 139.80), ("A100-80GB", 79.15), ("A100-40GB", 39.39)],
)
def test_readings_are_the_cudamemgetinfo_totals(name, gib):
    gpu = get_gpu(name)
    assert gpu.memory_measured
    assert gpu.memory_bytes == round(gib * GIB)


@pytest.mark.parametrize(
    "name, datasheet_gb",
    [("B200", 180), ("GB200", 186), ("B300", 288), ("GB300", 288), ("MI300X", 192), ("H100-NVL", 94)],
)
def test_derived_capacity_uses_the_h200_reading_to_datasheet_ratio(name, datasheet_gb):
    gpu = get_gpu(name)
    assert not gpu.memory_measured
    assert gpu.memory_bytes == round(datasheet_gb * 139.80 / 141 * GIB)


@pytest.mark.parametrize(
    "alias, name",
    [
        ("h100", "H100-80GB"),
        ("H100-80GB", "H100-80GB"),
        ("h100_80gb", "H100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("h200", "H200"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("a100", "A100-80GB"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("AMD Instinct MI300X", "MI300X"),
    ],
)
def test_aliases_and_device_names_resolve(alias, name):
    assert get_gpu(alias).name == name


def test_no_alias_belongs_to_two_gpus():
    keys = [lookup_key(n) for g in list_gpus() for n in (g.name, *g.aliases)]
    assert len(keys) == len(set(keys))


def test_unknown_gpu_lists_the_known_ones():
    with pytest.raises(InputError) as exc:
        get_gpu("V100")
    assert exc.value.problems[0].startswith(
        "unknown GPU 'V100'; known: A100-40GB, A100-80GB, H100-80GB, H100-NVL, H200, B200, GB200, B300, GB300, MI300X"
    )


def test_every_gpu_cites_a_vendor_source_and_has_throughputs():
    for gpu in list_gpus():
        assert "https://" in gpu.source
        assert gpu.bf16_flops > 1e14 and gpu.hbm_tbps > 1 and gpu.link_gbps > 0
        assert gpu.fp8_flops is None or gpu.fp8_flops == pytest.approx(2 * gpu.bf16_flops, rel=1e-3)


def test_cluster_gpu_memory_gib_overrides_the_catalog_capacity():
    assert capacity_bytes("H100-80GB", 70) == 70 * GIB
    assert capacity_bytes("h200", None) == round(139.80 * GIB)
