from memtune.catalog.models import get_model
from memtune.config import load_job


def test_preset_fills_the_model_section_and_the_file_overrides_it(write):
    path = write(
        "job.yaml", "model:\n  preset: llama3-70b\n  tensor_model_parallel_size: 4\n  seq_length: 2048\n"
    )
    job = load_job(path).job
    assert job.model.num_layers == 80 and job.model.ffn_hidden_size == 28672
    assert job.model.tensor_model_parallel_size == 4
    assert job.model.seq_length == 2048  # the preset says 8192
    assert load_job(path).format == "memtune"


def test_preset_result_equals_writing_the_keys_out(write):
    written = write(
        "full.yaml", "model: " + str({**get_model("qwen3-8b"), "seq_length": 1024}).replace("'", '"')
    )
    preset = write("preset.yaml", "model:\n  preset: QWEN3-8B\n  seq_length: 1024\n")
    assert load_job(written).job == load_job(preset).job


def test_dotted_overrides_apply_after_the_preset(write):
    path = write("job.yaml", "model:\n  preset: llama3-8b\n")
    job = load_job(
        path, ["model.tensor_model_parallel_size=8", "train.global_batch_size=256", "cluster.gpu=H200"]
    ).job
    assert job.model.tensor_model_parallel_size == 8
    assert job.train.global_batch_size == 256
    assert job.cluster.gpu == "H200"
    assert job.model.num_layers == 32
