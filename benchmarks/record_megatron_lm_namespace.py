"""Record the ``argparse.Namespace`` Megatron-LM's own parser builds for a launch script, as JSON.

memtune's tests cannot run Megatron-LM's parser (it is not on PyPI: the ``megatron-core`` wheel
has no ``megatron/training``), so ``tests/api/fixtures/*.namespace.json`` hold what it returned.
Run with a Megatron-LM checkout (Python 3.12, torch, numpy, packaging) and memtune importable::

    cd MEGATRON_LM_CHECKOUT && PYTHONPATH=.:MEMTUNE python MEMTUNE/benchmarks/record_megatron_lm_namespace.py \
        MEMTUNE/examples/megatron-lm-llama3-8b.sh OUT.json [--world-size 8] [--commit SHA] [extra flags ...]

The launch script's training command is found by memtune's own shell reader; the words after the
``.py`` go to Megatron-LM's ``parse_args()`` unchanged. One module that needs triton at import
(``megatron/core/transformer/moe/ops/paged_stash.py``; no argument lives there) is replaced by an
empty stand-in, since triton has no CPU build. Values JSON cannot hold are written as
``{"enum": "Class.name", "value": v}`` and ``{"dtype": "torch.bfloat16"}``.
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import subprocess
import sys
import types
from pathlib import Path


class _Empty(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def _plain(value: object) -> object:
    if isinstance(value, enum.Enum):
        return {"enum": f"{type(value).__name__}.{value.name}", "value": value.value}
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return {"dtype": str(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return {"repr": repr(value)}


def main() -> None:
    cli = argparse.ArgumentParser()
    cli.add_argument("script")
    cli.add_argument("out")
    cli.add_argument("--world-size", type=int, default=1)
    cli.add_argument("--commit", help="the checkout's commit, where it is no git work tree")
    known, extra = cli.parse_known_args()
    from memtune.config.loaders._shell import parse_script
    from memtune.config.loaders.megatron_args import _split_launcher, _training_command

    command = _training_command(parse_script(Path(known.script).read_text()))
    assert command is not None
    _, words = _split_launcher(command.words)
    sys.modules["megatron.core.transformer.moe.ops.paged_stash"] = _Empty("paged_stash")
    os.environ["WORLD_SIZE"] = str(known.world_size)
    from megatron.training.arguments import parse_args

    sys.argv = ["pretrain_gpt.py", *words, *extra]
    namespace = parse_args()
    commit = (
        known.commit
        or subprocess.run(
            ["git", "rev-parse", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    document = {
        "recorded_by": "benchmarks/record_megatron_lm_namespace.py",
        "megatron_lm_commit": commit,
        "script": Path(known.script).name,
        "argv": sys.argv[1:],
        "namespace": {key: _plain(value) for key, value in sorted(vars(namespace).items())},
    }
    Path(known.out).write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
