"""The corpus of hostile inputs: every file is under 1 MB and its name says what it exercises.

Files up to 64 KiB are committed under tests/hostile/corpus/ (regenerate them by running this
script); the tests write the whole corpus, larger files included, into a temporary directory.
test_corpus.py runs every command on every file and holds memtune to its promise: exit 0, 1 or 2,
no traceback, a bounded number of error lines, within seconds.

Run:  python tests/hostile/make_corpus.py
"""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"

MODEL = "model:\n  num_layers: 4\n  hidden_size: 256\n  num_attention_heads: 4\n  vocab_size: 1000\n"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.00 GiB memory in use. "
    "Of the allocated memory 60.00 GiB is allocated by PyTorch, and 17.00 GiB is reserved by PyTorch but unallocated."
)
LINE = 64 << 10  # the scanner's maximum line length


def _alias_bomb(levels: int = 12) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + f"\n{MODEL}dataset:\n  bomb: *a{levels - 1}\n"


def configs() -> dict[str, str | bytes]:
    return {
        "yaml-alias-bomb.yaml": _alias_bomb(),
        "yaml-self-alias.yaml": f"{MODEL}dataset: &loop\n  inner: *loop\n",
        "yaml-self-alias-list.yaml": "a: &a [*a]\n" + MODEL,
        "yaml-deep.yaml": "model: " + "[" * 3000 + "]" * 3000 + "\n",
        "json-deep.json": '{"model": ' + "[" * 100000 + "]" * 100000 + "}",
        "yaml-deep-mapping.yaml": "".join(f"{'  ' * i}k{i}:\n" for i in range(200)) + "  " * 200 + "x: 1\n",
        "yaml-5000-digit-int.yaml": MODEL.replace("num_layers: 4", "num_layers: " + "9" * 5000),
        "json-5000-digit-int.json": json.dumps({"model": {"num_layers": 1}})[:-2]
        + ', "hidden_size": '
        + "9" * 5000
        + "}}",
        "yaml-inf-memory.yaml": MODEL + "cluster:\n  gpu_memory_gib: .inf\n",
        "yaml-nan-dropout.yaml": MODEL + "  hidden_dropout: .nan\n",
        "yaml-bool-layers.yaml": MODEL.replace("num_layers: 4", "num_layers: true"),
        "yaml-1e30-layers.yaml": MODEL.replace("num_layers: 4", "num_layers: " + "1" + "0" * 30),
        "yaml-1e8-layers.yaml": MODEL.replace("num_layers: 4", "num_layers: 100000000"),
        "yaml-huge-batch.yaml": MODEL
        + "  virtual_pipeline_model_parallel_size: 2\n  pipeline_model_parallel_size: 2\n"
        "train:\n  global_batch_size: 100000000\n  micro_batch_size: 1\n",
        "yaml-huge-string.yaml": MODEL + "cluster:\n  gpu: " + "x" * 200000 + "\n",
        "yaml-huge-key.yaml": MODEL + "  " + "k" * 200000 + ": 1\n",
        "yaml-unknown-keys.yaml": MODEL + "".join(f"  unknown_{i}: {i}\n" for i in range(30000)),
        "yaml-python-tag.yaml": "model: !!python/object/apply:os.system ['echo pwned']\n",
        "yaml-not-a-mapping.yaml": "- 1\n- 2\n",
        "yaml-moe-list-huge.yaml": MODEL + "  moe_layer_freq: [" + ", ".join(["1"] * 50000) + "]\n",
        "bridge-int-keys.yaml": "checkpoint: {}\nmodel:\n  1: 2\n  num_layers: 4\n",
        "bridge-list-key.yaml": "checkpoint: {}\nmodel:\n  ? [a, b]\n  : 1\n",
        "bridge-target-list.yaml": "checkpoint: {}\nmodel:\n  _target_: [1, 2]\n  activation_func: {_target_: [x]}\n",
        "bridge-peft-huge.yaml": "checkpoint: {}\n" + MODEL + "peft:\n  _target_: " + "y" * 100000 + "\n",
        "hf-model-type-list.json": json.dumps({"model_type": ["llama"], "num_hidden_layers": 2}),
        "hf-architectures-int.json": json.dumps({"architectures": 7}),
        "hf-architectures-dicts.json": json.dumps({"architectures": [{"a": 1}]}),
        "hf-sparse-step-zero.json": json.dumps(
            {
                "model_type": "qwen2_moe",
                "num_hidden_layers": 4,
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_attention_heads": 4,
                "vocab_size": 100,
                "num_experts": 4,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 32,
                "decoder_sparse_step": 0,
            }
        ),
        "hf-string-layers.json": json.dumps(
            {
                "model_type": "qwen3_moe",
                "num_hidden_layers": "48",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_attention_heads": 4,
                "vocab_size": 100,
                "num_experts": 4,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 32,
            }
        ),
        "hf-huge-layers.json": json.dumps(
            {
                "model_type": "deepseek_v3",
                "num_hidden_layers": 10**12,
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_attention_heads": 4,
                "vocab_size": 100,
                "moe_intermediate_size": 8,
                "kv_lora_rank": 8,
                "qk_nope_head_dim": 8,
                "qk_rope_head_dim": 8,
                "v_head_dim": 8,
                "n_routed_experts": 4,
                "num_experts_per_tok": 2,
                "n_shared_experts": "xx",
            }
        ),
        "hf-activation-list.json": json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_attention_heads": 4,
                "vocab_size": 100,
                "hidden_act": ["silu"],
            }
        ),
        "hf-mlp-only-dicts.json": json.dumps(
            {
                "model_type": "qwen2_moe",
                "num_hidden_layers": 4,
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_attention_heads": 4,
                "vocab_size": 100,
                "num_experts": 4,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 32,
                "mlp_only_layers": [{"a": 1}],
            }
        ),
        "shell-doubling.sh": "A=xxxxxxxx\n"
        + "A=$A$A\n" * 64
        + "torchrun pretrain_gpt.py --num-layers 2 $A\n",
        "shell-array-doubling.sh": "A=(x y)\n"
        + "A=(${A[@]} ${A[@]})\n" * 64
        + "torchrun pretrain_gpt.py --num-layers 2\n",
        "shell-arith-terms.sh": "N=$(("
        + "+".join(["1"] * 100000)
        + "))\ntorchrun pretrain_gpt.py --num-layers $N\n",
        "shell-arith-nested.sh": "N=$(("
        + "(" * 5000
        + "1"
        + ")" * 5000
        + "))\ntorchrun pretrain_gpt.py --num-layers $N\n",
        "shell-arith-bigint.sh": "N=$(("
        + "*".join(["99999999"] * 2000)
        + "))\ntorchrun pretrain_gpt.py --num-layers $N\n",
        "shell-arith-unclosed.sh": "X=" + "$((1" * 50000 + "\ntorchrun pretrain_gpt.py --num-layers 2\n",
        "shell-default-unclosed.sh": "X=" + "${A:-" * 50000 + "\ntorchrun pretrain_gpt.py --num-layers 2\n",
        "shell-moe-list-bomb.sh": "torchrun pretrain_gpt.py --num-layers 4 --moe-layer-freq '([1]*100000)*100000'\n",
        "shell-moe-list-long.sh": "torchrun pretrain_gpt.py --num-layers 4 --moe-layer-freq '[1]*99999+[0]'\n",
        "shell-heredoc.sh": "cat > /tmp/x.sh <<'EOF'\ntorchrun pretrain_gpt.py --num-layers 999999 --hidden-size 1 "
        "--num-attention-heads 1 --vocab-size 1 --seq-length 1 --micro-batch-size 1\nEOF\n"
        "torchrun pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 128\n",
        "shell-unicode-digits.sh": "torchrun pretrain_gpt.py --num-layers ٣٢ --hidden-size ３２ --num-attention-heads 4 "
        "--vocab-size 128 --nproc-per-node ٨\n",
        "shell-huge-digits.sh": "torchrun --nproc-per-node "
        + "9" * 5000
        + " pretrain_gpt.py --num-layers "
        + "9" * 5000
        + " --hidden-dropout "
        + "9" * 400
        + " --attention-dropout nan\n",
        "shell-world-size.sh": "WORLD_SIZE=" + "7" * 5000 + "\ntorchrun pretrain_gpt.py --num-layers 2\n",
        "shell-unbalanced.sh": "torchrun pretrain_gpt.py --num-layers 2 'oops \n" + "(" * 10000 + "\n",
        "shell-no-value.sh": "torchrun pretrain_gpt.py --num-layers\n",
        "shell-flag-soup.sh": "torchrun pretrain_gpt.py "
        + " ".join(f"--flag-{i} {i}" for i in range(20000))
        + "\n",
        "yaml-version-digits.yaml": MODEL + "env:\n  torch_version: '" + "9" * 5000 + ".1'\n",
        "binary-config.yaml": b"\xff\xfe\x00\x01" * 100,
        "empty.yaml": b"",
    }


def logs() -> dict[str, str | bytes]:
    pad = LINE - 200
    return {
        "log-rank-memory-worst.log": "[Rank 1] " + "memory (MB) | " * (pad // 14) + "\n",
        "log-rank-memory-many.log": "".join(
            f"[Rank {r}] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0 | "
            f"reserved: 3.0 | max reserved: 4.0\n"
            for r in range(8000)
        ),
        "log-cpu-percent-worst.log": "CPU Virtual Memory: " + "percent = 1" * (pad // 11) + "\n",
        "log-narrative-lookahead.log": "NCCL_GRAPH_REGISTER " * (pad // 20) + "\n",
        "log-nccl-warn-worst.log": "NCCL WARN " * (pad // 10) + "\n",
        "log-inactive-worst.log": "inactive " * (pad // 9) + "\n",
        "log-whitespace-oom.log": "out of memory" + " " * pad + "x\n",
        "log-digits.log": "Tried to allocate " + "9" * pad + "\n",
        "log-digit-run.log": "9" * pad + " allowed;\n",
        "log-torch-version.log": "torch " * (pad // 6) + "\n",
        "log-torch-dots.log": "torch" + "." * pad + "\n",
        "log-exit-whitespace.log": "exit" + " " * pad + "code\n",
        "log-world-size.log": "world size: " + "9" * 5000 + "\n",
        "log-rank-prefix-digits.log": "[rank" + "9" * 5000 + "]: " + OOM + "\n",
        "log-pid-digits.log": OOM + " Process " + "9" * 5000 + " has 1.00 GiB memory in use.\n",
        "log-oom-size-400-digits.log": OOM.replace("2.00 GiB", "9" * 400 + " GiB") + "\n",
        "log-trigger-dense.log": (OOM + "\n") * 2000,
        "log-short-with-nul.log": b"\x00\x00" + OOM.encode() + b"\n\x00\n",
        "log-truncated.log.gz": gzip.compress(
            (("x" * 100 + "\n") * 2000 + OOM + "\n").encode() + b"y" * 300000
        )[:-20000],
        "log-not-gzip.log.gz": b"\x1f\x8bthis is not gzip",
        "log-binary.log": bytes(range(256)) * 100,
        "log-one-huge-line.log": "CUDA out of memory. " + "a" * (900 << 10) + "\n",
        "log-memory-summary-worst.log": "memory summary\n"
        + "| Allocated memory | "
        + "9" * 5000
        + " GiB |\n" * 40,
        "log-ansi.log": "\x1b[" + ";" * 60000 + "m" + OOM + "\n",
    }


def snapshots() -> dict[str, bytes]:
    shared_block = {
        "size": 512,
        "state": "active_allocated",
        "frames": [{"filename": "a.py", "line": 1}] * 50,
    }
    blocks = [shared_block] * 2000
    segment = {"total_size": 1 << 21, "blocks": blocks, "segment_pool_id": (0, 0)}
    cyclic: dict = {"x": b"bytes", "s": {1, 2}, (1, 2): "tuple key"}
    cyclic["self"] = cyclic
    return {
        "snap-memo-index.pickle": b"\x80\x04r\xff\xff\xff\x7fN.",
        "snap-memo-put-text.pickle": b"p9999999999999\nN.",
        "snap-os-system.pickle": b"cos\nsystem\n(Vtrue\ntR.",
        "snap-stack-global.pickle": b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85R.",
        "snap-shared-refs.pickle": pickle.dumps({"segments": [segment] * 2000}),
        "snap-huge-sizes.pickle": pickle.dumps(
            {"segments": [{"total_size": 2**2000, "blocks": [{"size": -(2**2000), "state": "inactive"}]}]}
        ),
        "snap-odd-values.pickle": pickle.dumps(
            {
                "segments": [
                    {
                        "total_size": 1024,
                        "blocks": [{"size": 1024, "state": "active_allocated", "frames": b"x"}],
                    }
                ],
                "allocator_settings": cyclic,
                "device_traces": [[{"action": "oom", "size": 4096, "device_free": {1, 2}}]],
            }
        ),
        "snap-not-segments.pickle": pickle.dumps({"segments": "nope"}),
        "snap-truncated.pickle": pickle.dumps({"segments": [segment] * 10})[:300],
        "snap-zero-bytes.pickle": b"\x00" * 1000,
        "snap-text.pickle": b"segments: []\n",
    }


COMMITTED_MAX_BYTES = 64 << 10  # larger inputs are only generated (by the tests, into a temporary directory)


def everything() -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for group in (configs(), logs(), snapshots()):
        for name, content in group.items():
            data = content.encode() if isinstance(content, str) else content
            assert len(data) < 1 << 20, (name, len(data))
            found[name] = data
    return found


def write(directory: Path, max_bytes: int | None = None) -> None:
    directory.mkdir(exist_ok=True)
    for name, data in everything().items():
        if max_bytes is None or len(data) <= max_bytes:
            (directory / name).write_bytes(data)


if __name__ == "__main__":
    write(CORPUS, COMMITTED_MAX_BYTES)
