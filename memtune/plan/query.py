"""Turn ``memtune plan``'s question (a model, GPUs, sequence, batch, mode, pins) into the base
job the search varies, and the pins into a candidate filter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memtune.catalog.gpus import get_gpu
from memtune.catalog.models import find_model, get_model
from memtune.config import LoadedJob, derive, validate
from memtune.config.arguments import RECIPE_WORD, is_override, load_from_words
from memtune.config.changes import Change, expandable_segments_changes, job_data, with_changes
from memtune.config.knobs import Knobs
from memtune.config.overrides import apply_overrides
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.infile import names_a_file
from memtune.numbers import echo
from memtune.plan.space import MODES, changes_of

USAGE = "memtune plan MODEL|--recipe NAME [OVERRIDE.yaml ...] [key=value ...] --gpus N --gbs B"


@dataclass(frozen=True)
class Query:
    model: str | None  # preset name or config file; None with a recipe
    gpus: int | None
    gpu: str | None
    gpus_per_node: int | None
    seq_length: int | None
    global_batch_size: int | None
    mode: str | None  # None: what the job says it trains (mode_of)
    pins: tuple[Change, ...] = ()
    overrides: tuple[str, ...] = ()  # Bridge override files, then dotted overrides (config/arguments.py)
    recipe: str | None = None


@dataclass(frozen=True)
class Mode:
    """What the plan trains, and why: ``--mode``, or what the job says it is."""

    name: str  # one of MODES
    why: str


def mode_of(q: Query, loaded: LoadedJob | None = None) -> Mode:
    """``--mode`` when given; else LoRA for a job with a ``peft`` section, fine-tuning for one
    whose file says it fine-tunes (a Bridge SFT or PEFT recipe or dataset, ``checkpoint.
    pretrained_checkpoint``, Megatron-LM's ``--finetune``), pretraining otherwise."""
    if q.mode is not None:
        if q.mode not in MODES:
            raise InputError(f"--mode: must be one of {', '.join(MODES)}, got {q.mode!r}")
        return Mode(q.mode, "--mode")
    if loaded is None and _written(q):
        loaded = _load(q)
    if loaded is None:
        return Mode("pretrain", "a model preset, and no --mode")
    if loaded.job.peft is not None:
        return Mode("lora", "the job has a peft section")
    if loaded.fine_tuning:
        return Mode("finetune", loaded.fine_tuning)
    return Mode("pretrain", "the job says nothing of fine-tuning")


def _written(q: Query) -> bool:
    """The model is a job as written (a config file or a recipe), not a preset."""
    return q.model is None or q.recipe is not None or names_a_file(q.model) or q.model.startswith(RECIPE_WORD)


def _load(q: Query) -> LoadedJob:
    words = [q.model, *q.overrides] if q.model is not None else list(q.overrides)
    return load_from_words(words, q.recipe, USAGE)


def written_job(q: Query) -> LoadedJob | None:
    """The job as written (a config file or a recipe, with its override files and dotted
    overrides), for what it did not use; None where the model is a preset."""
    return _load(q) if _written(q) else None


def base_job(q: Query) -> JobConfig:
    """The job every candidate starts from: the model, cluster, batch and mode asked for."""
    if q.mode is not None and q.mode not in MODES:
        raise InputError(f"--mode: must be one of {', '.join(MODES)}, got {q.mode!r}")
    if q.model is None and q.recipe is None:
        raise InputError(f"MODEL (a preset or a config file) or --recipe NAME is required: {USAGE}")
    written = _written(q)
    loaded = _load(q) if written else None
    mode = mode_of(q, loaded).name
    if loaded is not None:
        data = job_data(loaded.job)
    else:
        assert q.model is not None  # a preset: a job without a model is written (a recipe)
        try:
            find_model(q.model)
        except InputError as exc:
            raise InputError(
                f"MODEL: {echo(q.model)} is neither a file nor a preset; {exc.problems[0]}"
            ) from None
        files = [w for w in q.overrides if not is_override(w)]
        if files:
            raise InputError(
                f"{files[0]}: a Bridge override file goes over a config file or a recipe, not a preset"
            )
        data = apply_overrides({"model": {**get_model(q.model)}}, list(q.overrides))
    model, train, cluster = data["model"], data.setdefault("train", {}), data.setdefault("cluster", {})
    if q.seq_length:
        model["seq_length"] = q.seq_length
    if q.global_batch_size:
        train["global_batch_size"] = q.global_batch_size
    if q.gpus:
        cluster["num_gpus"] = q.gpus
    if q.gpu:
        get_gpu(q.gpu)
        cluster["gpu"] = q.gpu
    if q.gpus_per_node:
        cluster["gpus_per_node"] = q.gpus_per_node
    if not cluster.get("num_gpus"):
        raise InputError("--gpus: the GPU count is needed (the config sets no cluster.num_gpus)")
    if not train.get("global_batch_size"):
        raise InputError(
            "--gbs: the global batch size is needed (the config sets no train.global_batch_size)"
        )
    if not (model.get("bf16") or model.get("fp16")):
        model["bf16"] = True
    if not written:
        # A preset has no job as written: start from gradient-reduce overlap on, as Megatron-LM's
        # and Bridge's recipes run. A config keeps its own setting.
        data.setdefault("ddp", {}).setdefault("overlap_grad_reduce", True)
    if mode == "lora":
        data.setdefault("peft", {})
    else:
        data.pop("peft", None)
    job = validate(data)
    # A pinned split is also the job's own, so that the search offers it (plan/space.py, splits).
    fixed = [p for p in q.pins if p.key not in CANDIDATE_KEYS or p.key in SPLIT_KEYS]
    return with_changes(job, fixed) if fixed else job


# Every key a candidate sets (Knobs.changes), so a pin on one of them filters candidates and
# a pin on anything else changes the base job.
CANDIDATE_KEYS = {
    "model.tensor_model_parallel_size",
    "model.pipeline_model_parallel_size",
    "model.virtual_pipeline_model_parallel_size",
    "model.context_parallel_size",
    "model.expert_model_parallel_size",
    "model.expert_tensor_parallel_size",
    "model.sequence_parallel",
    "model.tp_comm_overlap",
    "model.pipeline_dtype",
    "model.account_for_embedding_in_pipeline_split",
    "model.account_for_loss_in_pipeline_split",
    "model.num_layers_in_first_pipeline_stage",
    "model.num_layers_in_last_pipeline_stage",
    "model.pipeline_model_parallel_layout",
    "model.recompute_granularity",
    "model.recompute_method",
    "model.recompute_num_layers",
    "model.recompute_modules",
    "model.cpu_offloading",
    "model.cpu_offloading_num_layers",
    "train.micro_batch_size",
    "ddp.use_distributed_optimizer",
    "optimizer.use_distributed_optimizer",
    "ddp.use_megatron_fsdp",
    "ddp.data_parallel_sharding_strategy",
    "ddp.overlap_param_gather",
    "optimizer.optimizer_cpu_offload",
    "optimizer.optimizer_offload_fraction",
    "optimizer.use_precision_aware_optimizer",
    "peft.sequence_parallel_input_regather",
}


# The candidate keys of the layer split.
SPLIT_KEYS = {
    "model.num_layers_in_first_pipeline_stage",
    "model.num_layers_in_last_pipeline_stage",
    "model.pipeline_model_parallel_layout",
}


def with_recommended_allocator(job: JobConfig) -> tuple[JobConfig, tuple[Change, ...]]:
    """The base job with expandable segments on where they are off and Megatron allows them (the
    field's first rule, at no cost: every layout is judged with the fragmentation margin they
    leave), and the changes that made it so; the job as it is otherwise."""
    changes = expandable_segments_changes(derive(job)) or ()
    return (with_changes(job, list(changes)), changes) if changes else (job, ())


def pin_filter(base: JobConfig, pins: tuple[Change, ...]) -> Callable[[Knobs], bool] | None:
    """Keep only candidates that set every pinned candidate key to the pinned value."""
    wanted = {p.key: p.value for p in pins if p.key in CANDIDATE_KEYS}
    if not wanted:
        return None

    def keep(c: Knobs) -> bool:
        values = {ch.key: ch.value for ch in changes_of(base, c)}
        # A key the candidate does not set (experts on a dense model) keeps the base's value.
        return all(values.get(k, _base_value(base, k)) == v for k, v in wanted.items())

    return keep


def _base_value(base: JobConfig, key: str) -> object:
    section, name = key.split(".", 1)
    part = getattr(base, section)
    return getattr(part, name) if part is not None else None
