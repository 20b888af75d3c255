"""Benchmarks that hold memtune to its claims (``memtune bench accuracy``)."""
