"""memtune.estimate / check / fix on live objects give what the commands give for the same job.

Megatron-Bridge cannot be installed on a CPU-only machine: its package imports Transformer Engine
at import time (``megatron/bridge/peft/lora_layers.py``: ``import transformer_engine.pytorch``),
whose PyTorch extension exists only as a CUDA source build. Its ``ConfigContainer`` is therefore
built here from megatron-core's real config classes (``TransformerConfig``, ``OptimizerConfig``,
``DistributedDataParallelConfig``; megatron-core installs on the CPU) under Bridge's field names
and defaults; :func:`test_a_bridge_recipe_function_gives_the_recipes_estimate` calls the recipe
function itself wherever the package imports. Megatron-LM's parser is not on PyPI either: its
Namespaces were recorded from the real parser (benchmarks/record_megatron_lm_namespace.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
from pathlib import Path

import pytest

import memtune
from memtune.cli import main
from memtune.config.loaders.objects import namespace_words
from memtune.errors import ArgumentTypeError, InputError
from memtune.estimate.render import estimate_json
from memtune.perf.step import throughput_of
from memtune.perf.uncertainty import step_uncertainty

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
LAUNCH = ROOT / "examples" / "megatron-lm-llama3-8b.sh"
ENV = ["env.CUDA_DEVICE_MAX_CONNECTIONS=1", "env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]


def cli_json(capsys, *words: str) -> dict:
    """``memtune estimate --json``, less the line that lists the flags a launch script sets and
    the estimate does not read: a parsed Namespace or a built container has no such flags."""
    capsys.readouterr()
    assert main(["estimate", *words, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    doc["assumptions"] = [a for a in doc["assumptions"] if not a.startswith("not used, their memory effect")]
    return doc


def api_json(est) -> dict:
    """What ``memtune estimate --json`` prints for ``est`` (the CLI adds the step's uncertainty)."""
    doc = estimate_json(est, throughput_of(est.derived), uncertainty=step_uncertainty(est.derived))
    return json.loads(json.dumps(doc))


def recorded_namespace(name: str) -> tuple[argparse.Namespace, list[str]]:
    """The Namespace Megatron-LM's parse_args() returned, rebuilt with its enum and dtype values."""
    document = json.loads((FIXTURES / f"{name}.namespace.json").read_text())

    def value(v: object) -> object:
        if isinstance(v, dict) and "enum" in v:
            cls, member = v["enum"].split(".")
            return enum.Enum(cls, {member: v["value"]})[member]
        if isinstance(v, dict) and "dtype" in v:
            torch = pytest.importorskip("torch")
            return getattr(torch, v["dtype"].removeprefix("torch."))
        return [value(x) for x in v] if isinstance(v, list) else v

    return argparse.Namespace(**{k: value(v) for k, v in document["namespace"].items()}), document["argv"]


# -- Megatron-LM ---------------------------------------------------------------------------------

PP2_FLAGS = (
    "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 4 --recompute-granularity full "
    "--recompute-method uniform --recompute-num-layers 1 --no-masked-softmax-fusion "
    "--no-gradient-accumulation-fusion --attention-backend unfused"
)


def test_a_recorded_namespace_gives_the_launch_scripts_estimate(capsys):
    namespace, _ = recorded_namespace("megatron-lm-llama3-8b")
    assert api_json(memtune.estimate(namespace, ENV)) == cli_json(capsys, str(LAUNCH))


def test_a_namespace_with_pipeline_and_negated_switches_gives_the_scripts_estimate(capsys, tmp_path):
    namespace, argv = recorded_namespace("megatron-lm-llama3-8b-pp2-vpp")
    assert " ".join(argv).endswith(PP2_FLAGS)
    script = LAUNCH.read_text().replace("NUM_NODES=${NUM_NODES:-1}", "NUM_NODES=2")
    script = script.replace("${EVAL_AND_LOGGING_ARGS[@]}", "${EVAL_AND_LOGGING_ARGS[@]} " + PP2_FLAGS)
    (tmp_path / "pp2.sh").write_text(script)
    est = memtune.estimate(namespace, ENV)
    assert est.derived.vpp == 4 and est.derived.pp == 2 and est.derived.world_size == 16
    assert not est.job.model.masked_softmax_fusion
    assert api_json(est) == cli_json(capsys, str(tmp_path / "pp2.sh"))


@pytest.mark.parametrize("name", ["megatron-lm-llama3-8b", "megatron-lm-llama3-8b-pp2-vpp"])
def test_only_flags_given_on_the_command_line_are_read_from_a_namespace(name):
    """Every other attribute holds the parser's default (the table in objects.py is right)."""
    namespace, argv = recorded_namespace(name)
    given = {w.split("=")[0] for w in argv if w.startswith("--")}
    assert {w for w in namespace_words(vars(namespace)) if w.startswith("--")} <= given


# -- Megatron-Bridge -----------------------------------------------------------------------------


def _bridge_classes():
    """Bridge's ConfigContainer as its classes build it: the model a TransformerConfig subclass
    with GPTModelProvider's own fields and defaults (src/megatron/bridge/models/gpt_provider.py),
    the optimizer and DDP configs megatron-core's own."""
    core = pytest.importorskip("megatron.core.transformer")
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig

    @dataclasses.dataclass
    class GPTModelProvider(core.TransformerConfig):
        vocab_size: int | None = None
        seq_length: int = 1024
        make_vocab_size_divisible_by: int = 128
        share_embeddings_and_output_weights: bool = True
        position_embedding_type: str = "learned_absolute"
        masked_softmax_fusion: bool = True
        cross_entropy_loss_fusion: bool = True
        cross_entropy_fusion_impl: str = "native"
        gradient_accumulation_fusion: bool = True
        deallocate_pipeline_outputs: bool = True

        def __post_init__(self) -> None:
            """Bridge defers megatron-core's checks to finalize() (src/megatron/bridge/models/transformer_config.py)."""

    @dataclasses.dataclass(kw_only=True)
    class TrainingConfig:
        micro_batch_size: int | None = None
        global_batch_size: int | None = None
        train_iters: int | None = None

    @dataclasses.dataclass(kw_only=True)
    class LoRA:
        target_modules: list[str]
        dim: int = 32
        alpha: int = 32
        dropout: float = 0.0

    LoRA.__module__, LoRA.__qualname__ = "megatron.bridge.peft.lora", "LoRA"  # its _target_

    @dataclasses.dataclass(kw_only=True)
    class ConfigContainer:
        train: TrainingConfig
        model: GPTModelProvider
        optimizer: OptimizerConfig
        ddp: DistributedDataParallelConfig
        peft: LoRA | None = None
        mixed_precision: str | None = None

    return (
        GPTModelProvider,
        TrainingConfig,
        LoRA,
        ConfigContainer,
        OptimizerConfig,
        DistributedDataParallelConfig,
    )


def _container(recipe_name: str):
    import torch

    from memtune.catalog.models import get_model
    from memtune.catalog.recipes import find_recipe

    Model, Train, LoRA, Container, Optimizer, DDP = _bridge_classes()
    sections = find_recipe(recipe_name).container()
    model = {**get_model(sections["model"].pop("preset")), **sections["model"]}
    model["activation_func"] = getattr(torch.nn.functional, model["activation_func"])
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    optimizer = {k: dtypes.get(v, v) for k, v in sections["optimizer"].items()}
    return Container(
        train=Train(**sections["train"]),
        model=Model(**model),
        optimizer=Optimizer(**optimizer),
        ddp=DDP(**sections["ddp"]),
        peft=LoRA(**sections["peft"]) if sections.get("peft") else None,
        mixed_precision=sections.get("mixed_precision"),
    ), sections["cluster"]


BRIDGE_RECIPES = ["llama3_8b_pretrain_config", "llama3_70b_peft_config", "llama3_70b_sft_config"]


@pytest.mark.parametrize("recipe", BRIDGE_RECIPES)
def test_a_bridge_config_container_gives_the_recipes_estimate(capsys, recipe):
    container, cluster = _container(recipe)
    est = memtune.estimate(container, gpus=cluster["num_gpus"], gpu=cluster["gpu"])
    assert api_json(est) == cli_json(capsys, "--recipe", recipe)


def test_a_bridge_recipe_function_gives_the_recipes_estimate(capsys):
    recipes = pytest.importorskip(
        "megatron.bridge.recipes", reason="Megatron-Bridge imports only with Transformer Engine"
    )
    from memtune.catalog.recipes import find_recipe

    recipe = find_recipe("llama3_8b_pretrain_config")
    container = getattr(recipes, recipe.name)()
    est = memtune.estimate(container, gpus=recipe.config["cluster"]["num_gpus"], gpu=recipe.gpu)
    assert api_json(est) == cli_json(capsys, "--recipe", recipe.name)


# -- the other entry points and inputs -------------------------------------------------------------


def test_a_dict_and_a_path_give_the_files_estimate(capsys):
    import yaml

    example = ROOT / "examples" / "llama3-70b-sft.yaml"
    expected = cli_json(capsys, str(example))
    assert api_json(memtune.estimate(example)) == expected
    assert api_json(memtune.estimate(yaml.safe_load(example.read_text()))) == expected
    assert api_json(memtune.estimate({"recipe": "llama3_8b_pretrain_config"})) == cli_json(
        capsys, "--recipe", "llama3_8b_pretrain_config"
    )


def test_check_returns_the_commands_findings(capsys):
    broken = ROOT / "examples" / "broken-llama3-8b.yaml"
    capsys.readouterr()
    main(["check", str(broken), "--json", "--show-info"])
    codes = [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]]
    assert [f.code for f in memtune.check(broken)] == codes
    assert "PAR006" in codes


def test_fix_returns_the_commands_ranked_suggestions(capsys):
    overrides = ["model.recompute_granularity=null", "train.micro_batch_size=2"]
    example = str(ROOT / "examples" / "llama3-70b-sft.yaml")
    capsys.readouterr()
    main(["fix", example, *overrides, "--json"])
    expected = json.loads(capsys.readouterr().out)
    result = memtune.fix(example, overrides)
    assert [s.title for s in result.suggestions] == [s["title"] for s in expected["suggestions"]]
    assert result.suggestions, "the job does not fit, so there is something to suggest"


def test_a_config_megatron_refuses_raises_its_message():
    with pytest.raises(
        InputError, match="PAR006 model.pipeline_model_parallel_size=2 but model.pipeline_dtype is not set"
    ):
        memtune.estimate(ROOT / "examples" / "broken-llama3-8b.yaml")


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: memtune.estimate(42), "config: must be a Megatron-Bridge ConfigContainer"),
        (lambda: memtune.estimate({}, "model.x=1"), "overrides: must be a list of strings"),
        (lambda: memtune.estimate({}, gpus="8"), "gpus: must be an integer"),
    ],
)
def test_wrong_types_are_type_errors_naming_the_argument(call, message):
    with pytest.raises(ArgumentTypeError, match=message):
        call()
    with pytest.raises(TypeError):
        call()


def test_a_memtune_job_is_read_as_its_own_data():
    est = memtune.estimate(ROOT / "examples" / "llama3-70b-sft.yaml")
    codes = [f.code for f in memtune.check(est.job, ["model.cpu_offloading=true"])]
    assert codes == ["PIP011", "OFF001", "OFF002", "OFF005", "ENV008"]  # the README's example
    assert api_json(memtune.estimate(est.job)) == api_json(est)


def test_the_package_is_still_a_package():
    from memtune.estimate import Estimate

    assert isinstance(memtune.estimate(ROOT / "examples" / "llama3-70b-sft.yaml"), Estimate)
