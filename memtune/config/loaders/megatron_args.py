"""A Megatron-LM launch: a shell script, or the argument text of ``pretrain_gpt.py``.

The script's variables and arrays are expanded (see :mod:`._shell`), the training command is the
one that runs a ``.py`` file with Megatron flags, and each flag memtune knows is mapped to its
Megatron-Core key. Other flags land in the ignored list. Exported memory-related environment
variables go to ``env``; torchrun's ``--nnodes`` x ``--nproc-per-node`` (or ``WORLD_SIZE``)
gives ``cluster.num_gpus``. The job states ``defaults: megatron-lm``, so where Megatron-LM's
argument defaults differ from Megatron-Core's (learned absolute position embeddings, the
fusions, fp32 gradient reduction with ``--bf16``; :mod:`memtune.config.stacks`) the Megatron-LM
behaviour is what the job gets.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtune.config.loaders._guards import load_yaml, read_config_text
from memtune.config.loaders._shell import Arithmetic, Command, Script, evaluate, parse_script
from memtune.config.schema import EnvConfig, UserbufferGemmConfig
from memtune.errors import InputError
from memtune.numbers import echo, float_or_none, int_or_none

LAUNCHER_GPU_FLAGS = {
    "nproc-per-node": "gpus_per_node",
    "nnodes": "nodes",
    "num-gpus": "gpus_per_node",
    "num-nodes": "nodes",
}
ENV_VARIABLES = tuple(name for name in EnvConfig.model_fields if name.isupper())


def _number(text: str) -> int | str:
    value = int_or_none(text)
    return text if value is None else value  # the schema says what is wrong with the text


def _real(text: str) -> float | str:
    value = float_or_none(text)
    return text if value is None else value


def _layer_freq(text: str) -> Arithmetic | str:
    value = evaluate(text)
    return text if value is None else value


def int_tuple(text: str) -> list[int] | str:
    """Megatron-LM's ``tuple_type``: ``127,0`` or ``(127,0)``."""
    values = [int_or_none(part) for part in text.strip("()").split(",")]
    return text if None in values else [v for v in values if v is not None]


def _auto_dtype(text: str) -> str | None:
    """Megatron-LM's ``auto`` dtype: take the model weights' dtype."""
    return None if text == "auto" else text


@dataclass(frozen=True)
class Value:
    """A flag with an argument (``many``: one or more, like argparse ``nargs='+'``)."""

    dest: str  # "section.key"; section "_" holds facts the loader combines afterwards
    convert: Callable[[str], object] = str
    many: bool = False


@dataclass(frozen=True)
class Switch:
    """A flag without an argument; it stores fixed values."""

    sets: dict[str, object]


def _on(dest: str) -> Switch:
    return Switch({dest: True})


FLAGS: dict[str, Value | Switch] = {
    # parallelism
    "tensor-model-parallel-size": Value("model.tensor_model_parallel_size", _number),
    "pipeline-model-parallel-size": Value("model.pipeline_model_parallel_size", _number),
    "num-virtual-stages-per-pipeline-rank": Value("model.virtual_pipeline_model_parallel_size", _number),
    "num-layers-per-virtual-pipeline-stage": Value("_.layers_per_virtual_stage", _number),
    "context-parallel-size": Value("model.context_parallel_size", _number),
    "cp-comm-type": Value("model.cp_comm_type", many=True),
    "hierarchical-context-parallel-sizes": Value(
        "model.hierarchical_context_parallel_sizes", _number, many=True
    ),
    "expert-model-parallel-size": Value("model.expert_model_parallel_size", _number),
    "expert-tensor-parallel-size": Value("model.expert_tensor_parallel_size", _number),
    "sequence-parallel": _on("model.sequence_parallel"),
    "decoder-first-pipeline-num-layers": Value("model.num_layers_in_first_pipeline_stage", _number),
    "decoder-last-pipeline-num-layers": Value("model.num_layers_in_last_pipeline_stage", _number),
    "num-layers-in-first-pipeline-stage": Value("model.num_layers_in_first_pipeline_stage", _number),
    "num-layers-in-last-pipeline-stage": Value("model.num_layers_in_last_pipeline_stage", _number),
    "account-for-embedding-in-pipeline-split": _on("model.account_for_embedding_in_pipeline_split"),
    "account-for-loss-in-pipeline-split": _on("model.account_for_loss_in_pipeline_split"),
    "pipeline-model-parallel-layout": Value("model.pipeline_model_parallel_layout"),
    "microbatch-group-size-per-virtual-pipeline-stage": Value(
        "model.microbatch_group_size_per_vp_stage", _number
    ),
    # architecture
    "num-layers": Value("model.num_layers", _number),
    "hidden-size": Value("model.hidden_size", _number),
    "ffn-hidden-size": Value("model.ffn_hidden_size", _number),
    "num-attention-heads": Value("model.num_attention_heads", _number),
    "group-query-attention": _on("_.group_query_attention"),
    "num-query-groups": Value("model.num_query_groups", _number),
    "kv-channels": Value("model.kv_channels", _number),
    "seq-length": Value("model.seq_length", _number),
    "vocab-size": Value("model.vocab_size", _number),
    "make-vocab-size-divisible-by": Value("model.make_vocab_size_divisible_by", _number),
    "swiglu": Switch({"model.gated_linear_unit": True, "model.activation_func": "silu"}),
    "squared-relu": Switch({"model.activation_func": "squared_relu"}),
    "quick-geglu": Switch({"model.gated_linear_unit": True, "model.activation_func": "quick_gelu"}),
    "normalization": Value("model.normalization"),
    "untie-embeddings-and-output-weights": Switch({"model.share_embeddings_and_output_weights": False}),
    "disable-bias-linear": Switch({"model.add_bias_linear": False}),
    "add-qkv-bias": _on("model.add_qkv_bias"),
    "qk-layernorm": _on("model.qk_layernorm"),
    "test-mode": _on("model.test_mode"),
    "hidden-dropout": Value("model.hidden_dropout", _real),
    "attention-dropout": Value("model.attention_dropout", _real),
    "position-embedding-type": Value("model.position_embedding_type"),
    "use-rotary-position-embeddings": Switch({"model.position_embedding_type": "rope"}),
    # mixture of experts
    "num-experts": Value("model.num_moe_experts", _number),
    "moe-router-topk": Value("model.moe_router_topk", _number),
    "moe-ffn-hidden-size": Value("model.moe_ffn_hidden_size", _number),
    "moe-shared-expert-intermediate-size": Value("model.moe_shared_expert_intermediate_size", _number),
    "moe-layer-freq": Value("model.moe_layer_freq", _layer_freq),
    "moe-grouped-gemm": _on("model.moe_grouped_gemm"),
    "moe-token-dispatcher-type": Value("model.moe_token_dispatcher_type"),
    "moe-router-load-balancing-type": Value("model.moe_router_load_balancing_type"),
    "moe-router-force-load-balancing": _on("model.moe_router_force_load_balancing"),
    "moe-expert-capacity-factor": Value("model.moe_expert_capacity_factor", _real),
    "moe-pad-expert-input-to-capacity": _on("model.moe_pad_expert_input_to_capacity"),
    "moe-shared-expert-overlap": _on("model.moe_shared_expert_overlap"),
    "moe-router-num-groups": Value("model.moe_router_num_groups", _number),
    "moe-router-group-topk": Value("model.moe_router_group_topk", _number),
    "moe-flex-dispatcher-backend": Value("model.moe_flex_dispatcher_backend"),
    "overlap-moe-expert-parallel-comm": _on("model.overlap_moe_expert_parallel_comm"),
    "tp-comm-overlap": _on("model.tp_comm_overlap"),
    "tp-comm-overlap-cfg": Value("_.tp_comm_overlap_cfg_file"),
    "delay-wgrad-compute": _on("model.delay_wgrad_compute"),
    # multi-latent attention, multi-token prediction
    "multi-latent-attention": _on("model.multi_latent_attention"),
    "q-lora-rank": Value("model.q_lora_rank", _number),
    "kv-lora-rank": Value("model.kv_lora_rank", _number),
    "qk-head-dim": Value("model.qk_head_dim", _number),
    "qk-pos-emb-head-dim": Value("model.qk_pos_emb_head_dim", _number),
    "v-head-dim": Value("model.v_head_dim", _number),
    "mtp-num-layers": Value("model.mtp_num_layers", _number),
    # recompute and offload
    "recompute-granularity": Value("model.recompute_granularity"),
    "recompute-method": Value("model.recompute_method"),
    "recompute-num-layers": Value("model.recompute_num_layers", _number),
    "recompute-modules": Value("model.recompute_modules", many=True),
    "recompute-activations": _on("_.recompute_activations"),
    "distribute-saved-activations": _on("model.distribute_saved_activations"),
    "cpu-offloading": _on("model.cpu_offloading"),
    "cpu-offloading-num-layers": Value("model.cpu_offloading_num_layers", _number),
    "fine-grained-activation-offloading": _on("model.fine_grained_activation_offloading"),
    "offload-modules": Value("model.offload_modules", many=True),
    "min-offloaded-tensor-size": Value("model.min_offloaded_tensor_size", _number),
    "activation-offload-fraction": Value("model.activation_offload_fraction", _real),
    # precision
    "bf16": _on("model.bf16"),
    "fp16": _on("model.fp16"),
    "fp8-format": Value("model.fp8"),
    "fp8-recipe": Value("model.fp8_recipe"),
    "fp8-param-gather": _on("model.fp8_param_gather"),
    "grad-reduce-in-bf16": _on("_.grad_reduce_in_bf16"),
    "accumulate-allreduce-grads-in-fp32": _on("_.accumulate_allreduce_grads_in_fp32"),
    # fusions (Megatron-LM turns the first four on by default: memtune/config/stacks.py)
    "no-masked-softmax-fusion": Switch({"model.masked_softmax_fusion": False}),
    "no-bias-swiglu-fusion": Switch({"_.no_bias_swiglu_fusion": True}),
    "no-bias-gelu-fusion": Switch({"_.no_bias_gelu_fusion": True}),
    "no-gradient-accumulation-fusion": Switch({"model.gradient_accumulation_fusion": False}),
    "attention-softmax-in-fp32": _on("model.attention_softmax_in_fp32"),
    "apply-query-key-layer-scaling": _on("model.attention_softmax_in_fp32"),
    "cross-entropy-loss-fusion": _on("model.cross_entropy_loss_fusion"),
    "cross-entropy-fusion-impl": Value("model.cross_entropy_fusion_impl"),
    # implementation, CUDA graphs
    "transformer-impl": Value("model.transformer_impl"),
    "attention-backend": Value("model.attention_backend"),
    "window-size": Value("model.window_size", int_tuple),
    "window-attn-skip-freq": Value("model.window_attn_skip_freq", _layer_freq),
    "softmax-type": Value("model.softmax_type"),
    "cuda-graph-impl": Value("model.cuda_graph_impl"),
    "cuda-graph-scope": Value("model.cuda_graph_scope", many=True),
    "enable-cuda-graph": Switch({"model.cuda_graph_impl": "local"}),
    "external-cuda-graph": Switch({"model.cuda_graph_impl": "transformer_engine"}),
    # tokenizer: gives the vocabulary when --vocab-size is absent
    "tokenizer-type": Value("_.tokenizer_type"),
    "tokenizer-model": Value("_.tokenizer_model"),
    "vocab-file": Value("_.vocab_file"),
    "merge-file": Value("_.merge_file"),
    # batch
    "micro-batch-size": Value("train.micro_batch_size", _number),
    "global-batch-size": Value("train.global_batch_size", _number),
    "manual-gc": _on("train.manual_gc"),
    # resuming from a checkpoint (docs/resume.md)
    "load": Value("checkpoint.load"),
    "no-load-optim": Switch({"checkpoint.load_optim": False}),
    "finetune": Switch({"checkpoint.finetune": True, "_.finetune": True}),
    "pretrained-checkpoint": Value("checkpoint.pretrained_checkpoint"),
    "no-load-rng": Switch({"checkpoint.load_rng": False}),
    "ckpt-format": Value("checkpoint.ckpt_format"),
    "ckpt-fully-parallel-load": _on("checkpoint.fully_parallel_load"),
    # saving checkpoints (docs/save.md)
    "save": Value("checkpoint.save"),
    "no-save-optim": Switch({"checkpoint.save_optim": False}),
    "no-save-rng": Switch({"checkpoint.save_rng": False}),
    "no-ckpt-fully-parallel-save": Switch({"checkpoint.fully_parallel_save": False}),
    # deprecated, no effect: fully parallel save is Megatron-LM's default (arguments.py)
    "ckpt-fully-parallel-save": _on("checkpoint.fully_parallel_save"),
    "async-save": _on("checkpoint.async_save"),
    "use-persistent-ckpt-worker": _on("checkpoint.use_persistent_ckpt_worker"),
    "ckpt-assume-constant-structure": _on("checkpoint.ckpt_assume_constant_structure"),
    "dist-ckpt-optim-fully-reshardable": _on("checkpoint.dist_ckpt_optim_fully_reshardable"),
    "distrib-optim-fully-reshardable-mem-efficient": _on(
        "checkpoint.distrib_optim_fully_reshardable_mem_efficient"
    ),
    # optimizer and data parallelism
    "optimizer": Value("optimizer.optimizer"),
    "use-distributed-optimizer": Switch(
        {"optimizer.use_distributed_optimizer": True, "ddp.use_distributed_optimizer": True}
    ),
    "use-precision-aware-optimizer": _on("optimizer.use_precision_aware_optimizer"),
    "main-grads-dtype": Value("optimizer.main_grads_dtype"),
    "main-params-dtype": Value("optimizer.main_params_dtype"),
    "exp-avg-dtype": Value("optimizer.exp_avg_dtype"),
    "exp-avg-sq-dtype": Value("optimizer.exp_avg_sq_dtype"),
    "optimizer-cpu-offload": _on("optimizer.optimizer_cpu_offload"),
    "optimizer-offload-fraction": Value("optimizer.optimizer_offload_fraction", _real),
    "overlap-grad-reduce": _on("ddp.overlap_grad_reduce"),
    "overlap-param-gather": _on("ddp.overlap_param_gather"),
    "ddp-bucket-size": Value("ddp.bucket_size", _number),
    "use-megatron-fsdp": _on("ddp.use_megatron_fsdp"),
    "data-parallel-sharding-strategy": Value("ddp.data_parallel_sharding_strategy"),
    "megatron-fsdp-main-params-dtype": Value("ddp.megatron_fsdp_main_params_dtype", _auto_dtype),
    "megatron-fsdp-main-grads-dtype": Value("ddp.megatron_fsdp_main_grads_dtype", _auto_dtype),
    "num-distributed-optimizer-instances": Value("ddp.num_distributed_optimizer_instances", _number),
    "use-nccl-ub": _on("env.use_nccl_ub"),
}


def looks_like_launch(path: Path, text: str) -> bool:
    if path.suffix in (".sh", ".bash"):
        return True
    if path.suffix in (".yaml", ".yml", ".json"):
        return False
    first = next(
        (line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith("#")), ""
    )
    return (
        text.startswith("#!")
        or first in ("torchrun", "python", "python3", "deepspeed", "srun")
        or "--num-layers" in text
    )


def read(path: Path, text: str) -> tuple[dict[str, Any], list[str], dict[str, str], str | None]:
    """The job, the flags not used, for keys the launch cannot give the line to say if no
    override supplies them, and why the job fine-tunes (None when it does not say)."""
    script = parse_script(text)
    command = _training_command(script)
    if command is None:
        raise InputError(
            f"{path}: no training command found (expected e.g. `torchrun ... pretrain_gpt.py --num-layers ...`)"
        )
    launcher, args = _split_launcher(command.words)
    data, ignored = _map_flags(args)
    if not MODEL_FLAG_KEYS & data["model"].keys():
        raise InputError(_why_no_model_flags(path, script, command))
    _combine(path, data, ignored)
    _environment(script, command, data, ignored)
    _cluster(script, launcher, data, ignored)
    return _finish(data, ignored)


def read_words(
    where: Path, words: list[str], num_gpus: int | None
) -> tuple[dict[str, Any], list[str], dict[str, str], str | None]:
    """:func:`read` for the training script's own arguments alone (no shell, no launcher), as
    the Python API builds them from a Namespace; ``num_gpus`` is the job's world size."""
    data, ignored = _map_flags(words)
    if not MODEL_FLAG_KEYS & data["model"].keys():
        raise InputError(f"{where}: sets no --num-layers, --hidden-size or --num-attention-heads")
    _combine(where, data, ignored)
    if num_gpus is not None:
        data["cluster"] = {"num_gpus": num_gpus}
    return _finish(data, ignored)


def _finish(
    data: dict[str, dict[str, Any]], ignored: list[str]
) -> tuple[dict[str, Any], list[str], dict[str, str], str | None]:
    sections = {section: values for section, values in data.items() if values and section != "_"}
    missing = {"model.vocab_size": data["_"]["missing_vocab"]} if "missing_vocab" in data["_"] else {}
    fine_tuning = "Megatron-LM's --finetune" if data["_"].get("finetune") else None
    return {"defaults": "megatron-lm", **sections}, ignored, missing, fine_tuning


# Vocabulary sizes of tokenizers a launch names without --vocab-size: GPT-2's BPE files hold
# 50257 tokens (encoder.json); Megatron's TikTokenizer (the Llama-3-style tiktoken files) caps its
# vocabulary at 2**17 (megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py
# DEFAULT_TIKTOKEN_MAX_VOCAB, special tokens included); Hugging Face tokenizers by model name,
# len(tokenizer) with the special tokens (the model cards' config.json vocab_size, which equals it
# for these).
GPT2_BPE_VOCAB = 50257
TIKTOKEN_VOCAB = 2**17
HF_TOKENIZER_VOCAB = {
    "meta-llama/Meta-Llama-3-8B": 128256,
    "meta-llama/Meta-Llama-3-70B": 128256,
    "meta-llama/Llama-3.1-8B": 128256,
    "meta-llama/Llama-3.1-70B": 128256,
    "meta-llama/Llama-3.1-405B": 128256,
    "mistralai/Mixtral-8x7B-v0.1": 32000,
    "mistralai/Mixtral-8x22B-v0.1": 32768,
}
# Entry points that train something other than a GPT-style decoder.
NON_GPT_ENTRY_POINTS = (
    "pretrain_bert.py",
    "pretrain_t5.py",
    "pretrain_mamba.py",
    "pretrain_vlm.py",
    "pretrain_ict.py",
)


def _vocabulary(path: Path, model: dict[str, Any], facts: dict[str, Any]) -> None:
    """Megatron-LM's vocabulary when the launch gives no --vocab-size, from its tokenizer flags."""
    kind = facts.get("tokenizer_type")
    if "vocab_size" in model:  # NullTokenizer's vocabulary is --vocab-size itself
        return
    name = str(facts.get("tokenizer_model", "")).removesuffix("/")
    if kind == "GPT2BPETokenizer" or (kind is None and facts.get("vocab_file") and facts.get("merge_file")):
        model["vocab_size"] = GPT2_BPE_VOCAB
    elif kind == "TikTokenizer":
        model["vocab_size"] = TIKTOKEN_VOCAB
    elif kind == "HuggingFaceTokenizer" and name in HF_TOKENIZER_VOCAB:
        model["vocab_size"] = HF_TOKENIZER_VOCAB[name]
    elif kind is not None:
        what = f"--tokenizer-type {kind}" + (f" --tokenizer-model {name}" if name else "")
        facts["missing_vocab"] = (
            f"{path}: the vocabulary size of {what} is not known without the tokenizer files; "
            "pass it as model.vocab_size=N"
        )


MODEL_FLAG_KEYS = frozenset({"num_layers", "hidden_size", "num_attention_heads"})
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def _why_no_model_flags(path: Path, script: Script, command: Command) -> str:
    """One line for a launch whose model flags live outside the script."""
    sourced = [c.words[1] for c in script.commands if len(c.words) > 1 and c.words[0] in ("source", ".")]
    if sourced:
        return (
            f"{path}: the model flags come from a file the script sources ({sourced[0]}), which memtune "
            "does not follow; give the expanded command line instead (what `bash -x` prints for it)"
        )
    unset = sorted(
        {name for name in _VARIABLE.findall(" ".join(command.words)) if name not in script.variables}
    )
    if unset:
        return (
            f"{path}: the model flags come from variables the script does not set ({', '.join(unset)}); "
            "give the expanded command line instead (what `bash -x` prints for it)"
        )
    return f"{path}: the training command sets no --num-layers, --hidden-size or --num-attention-heads"


def _training_command(script: Script) -> Command | None:
    """The command with Megatron's flags: the one that sets --num-layers, else the one with most flags."""
    candidates = [c for c in script.commands if any(w.startswith("--") for w in c.words)]
    if not candidates:
        return None
    with_layers = [
        c for c in candidates if any(w.split("=")[0] in ("--num-layers", "--num_layers") for w in c.words)
    ]
    return max(with_layers or candidates, key=lambda c: sum(w.startswith("--") for w in c.words))


def _split_launcher(words: list[str]) -> tuple[list[str], list[str]]:
    """Launcher words (torchrun and its options) and the training script's own arguments."""
    for i, word in enumerate(words):
        if word.endswith(".py"):
            if Path(word).name in NON_GPT_ENTRY_POINTS:
                raise InputError(
                    f"{Path(word).name} trains a model memtune does not estimate; memtune reads "
                    "GPT-style decoder launches (pretrain_gpt.py and scripts taking its flags)"
                )
            return words[:i], words[i + 1 :]
    first_flag = next((i for i, w in enumerate(words) if w.startswith("--")), len(words))
    return words[:first_flag], words[first_flag:]


def _map_flags(args: list[str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    data: dict[str, dict[str, Any]] = {
        "model": {},
        "train": {},
        "optimizer": {},
        "ddp": {},
        "checkpoint": {},
        "env": {},
        "_": {},
    }
    ignored: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if not word.startswith("--"):
            ignored.append(word)
            continue
        name, has_inline, inline = word[2:].partition("=")
        values = [inline] if has_inline else []
        spec = FLAGS.get(name.replace("_", "-"))
        takes_values = isinstance(spec, Value) or spec is None
        if takes_values and not has_inline:
            while i < len(args) and not args[i].startswith("--"):
                values.append(args[i])
                i += 1
                if isinstance(spec, Value) and not spec.many:
                    break
        if spec is None:
            ignored.append(" ".join([f"--{name}", *values]))
        elif isinstance(spec, Switch):
            for dest, value in spec.sets.items():
                _store(data, dest, value)
        elif not values:
            raise InputError(f"--{echo(name)[1:-1]}: expects a value")
        else:
            _store(
                data, spec.dest, [spec.convert(v) for v in values] if spec.many else spec.convert(values[0])
            )
    return data, ignored


def _store(data: dict[str, dict[str, Any]], dest: str, value: object) -> None:
    section, key = dest.split(".")
    data[section][key] = value


def _combine(path: Path, data: dict[str, dict[str, Any]], ignored: list[str]) -> None:
    """Flags whose meaning depends on other flags, resolved the way Megatron-LM's validate_args does."""
    model, facts = data["model"], data["_"]
    if "num_query_groups" in model and not facts.get("group_query_attention"):
        del model["num_query_groups"]
        ignored.append("--num-query-groups (Megatron-LM uses it only with --group-query-attention)")
    _vocabulary(path, model, facts)
    if "tp_comm_overlap_cfg_file" in facts:
        _overlap_file(path, str(facts["tp_comm_overlap_cfg_file"]), model, ignored)
    if facts.get("recompute_activations"):
        model.setdefault("recompute_granularity", "selective")
    if isinstance(model.get("cpu_offloading_num_layers"), int) and model["cpu_offloading_num_layers"] > 0:
        model["cpu_offloading"] = True
    # Megatron-LM's own defaults (learned positions, the fusions, pipeline_dtype, fp32 gradient
    # reduction with bf16) come from the stack: memtune/config/stacks.py, `defaults: megatron-lm`.
    swiglu = model.get("activation_func") == "silu" and model.get("gated_linear_unit")
    if facts.get("no_bias_swiglu_fusion" if swiglu else "no_bias_gelu_fusion"):
        model["bias_activation_fusion"] = False
    if facts.get("accumulate_allreduce_grads_in_fp32"):
        data["ddp"]["grad_reduce_in_fp32"] = True
    elif facts.get("grad_reduce_in_bf16"):
        data["ddp"]["grad_reduce_in_fp32"] = False
    if "pipeline_model_parallel_layout" in model and (
        "layers_per_virtual_stage" in facts or "virtual_pipeline_model_parallel_size" in model
    ):
        raise InputError(
            f"{path}: --pipeline-model-parallel-layout sets the virtual stages itself; Megatron-LM refuses it "
            "with --num-layers-per-virtual-pipeline-stage or --num-virtual-stages-per-pipeline-rank"
        )
    if "layers_per_virtual_stage" in facts:
        model["virtual_pipeline_model_parallel_size"] = _virtual_stages(
            path, model, facts["layers_per_virtual_stage"]
        )


def _overlap_file(path: Path, name: str, model: dict[str, Any], ignored: list[str]) -> None:
    """``--tp-comm-overlap-cfg``: Transformer Engine's userbuffer settings per GEMM, a YAML file
    Megatron-LM opens from its working directory (``training/initialize.py``), looked for beside
    the launch and in the current directory. The fields memtune prices become
    ``model.tp_comm_overlap_cfg``; the others, or a file not found, are listed as ignored."""
    found = next(
        (p for p in (Path(name), path.parent / name) if p.is_file()),
        None,
    )
    if found is None:
        ignored.append(
            f"--tp-comm-overlap-cfg {name} (not found beside the launch or here: Transformer Engine's defaults priced)"
        )
        return
    settings = load_yaml(read_config_text(found), str(found))
    if not isinstance(settings, dict) or not all(isinstance(v, dict | None) for v in settings.values()):
        raise InputError(
            f"{echo(str(found))}: --tp-comm-overlap-cfg: expected a mapping of GEMM names to settings"
        )
    priced = UserbufferGemmConfig.model_fields
    model["tp_comm_overlap_cfg"] = {
        gemm: {k: v for k, v in fields.items() if k in priced}
        for gemm, fields in settings.items()
        if fields is not None
    }
    ignored.extend(
        f"--tp-comm-overlap-cfg {name}: {gemm}.{k}"
        for gemm, fields in settings.items()
        for k in (fields or {})
        if k not in priced
    )


def _virtual_stages(path: Path, model: dict[str, Any], layers_per_stage_chunk: object) -> int | None:
    layers, pp = model.get("num_layers"), model.get("pipeline_model_parallel_size", 1)
    if not (
        isinstance(layers, int)
        and isinstance(pp, int)
        and isinstance(layers_per_stage_chunk, int)
        and min(layers, pp, layers_per_stage_chunk) > 0
    ):
        return None  # the schema reports the bad or missing numbers themselves
    layers += int(bool(model.get("account_for_embedding_in_pipeline_split")))
    layers += int(bool(model.get("account_for_loss_in_pipeline_split")))
    per_stage = layers // pp
    if layers % pp or per_stage % layers_per_stage_chunk:
        raise InputError(
            f"{path}: --num-layers-per-virtual-pipeline-stage {layers_per_stage_chunk}: {layers} layers over "
            f"{pp} pipeline stages do not split into chunks of {layers_per_stage_chunk}"
        )
    return per_stage // layers_per_stage_chunk


def _environment(
    script: Script, command: Command, data: dict[str, dict[str, Any]], ignored: list[str]
) -> None:
    for name in ENV_VARIABLES:
        value = command.env.get(name, script.exported_value(name))
        if value is not None:
            data["env"][name] = value
        elif name in script.variables:
            ignored.append(
                f"{name} (set in the script but not exported, so the training process does not see it)"
            )


def _cluster(
    script: Script, launcher: list[str], data: dict[str, dict[str, Any]], ignored: list[str]
) -> None:
    """The GPU count from the launcher's flags, else WORLD_SIZE. A value that is not a number
    memtune reads (torchrun's ``gpu``/``auto``, a command substitution, ``²``, 5,000 digits) is
    listed as ignored: the count then comes from the config or the defaults, and the user is told."""
    unread = " (not a number memtune reads; set cluster.num_gpus)"
    found: dict[str, int] = {}
    for i, word in enumerate(launcher):
        name, has_inline, inline = word.lstrip("-").partition("=")
        key = LAUNCHER_GPU_FLAGS.get(name.replace("_", "-")) if word.startswith("--") else None
        text = inline if has_inline else (launcher[i + 1] if i + 1 < len(launcher) else "")
        if key is None:
            continue
        number = int_or_none(text)
        if number is None:
            ignored.append(f"--{name} {echo(text)}{unread}")
        else:
            found[key] = number
    cluster: dict[str, int] = {}
    world_text = str(script.variables.get("WORLD_SIZE", ""))
    if "gpus_per_node" in found:
        cluster["gpus_per_node"] = found["gpus_per_node"]
        cluster["num_gpus"] = found["gpus_per_node"] * found.get("nodes", 1)
    elif (world := int_or_none(world_text)) is not None:
        cluster["num_gpus"] = world
    elif "WORLD_SIZE" in script.variables:
        ignored.append(f"WORLD_SIZE={echo(world_text)}{unread}")
    if cluster:
        data["cluster"] = cluster
