"""``memtune measure``: the true memory peak of one rank of a Megatron-Core job, on one GPU.

:mod:`memtune.measure.plan` turns a job into a plan (pure Python), :mod:`memtune.measure.run`
runs it in a subprocess, and :mod:`memtune.measure.runner` is that subprocess (torch and
megatron-core only; :mod:`memtune.measure.checkpoint` is its checkpoint round trip for
``--resume``). This package file imports nothing, so the subprocess starts without
memtune's own dependencies.
"""
