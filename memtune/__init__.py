"""memtune: plan, check, measure and repair GPU memory use in Megatron-style LLM training."""

__version__ = "0.1.0"
