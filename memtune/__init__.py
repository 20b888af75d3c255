"""memtune: plan, check, measure and repair GPU memory use in Megatron-style LLM training."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """``memtune.estimate``, ``check`` and ``fix`` (packages that, called, are memtune/api.py's
    functions) and ``memtune.load``, imported when first used so that ``import memtune`` stays light."""
    import importlib

    if name in ("estimate", "check", "fix"):
        return importlib.import_module(f"memtune.{name}")
    if name == "load":
        return importlib.import_module("memtune.api").load
    raise AttributeError(f"module 'memtune' has no attribute {name!r}")
