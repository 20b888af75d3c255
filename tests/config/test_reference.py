"""docs/config.md is generated from the schema, and every key is documented there."""

from __future__ import annotations

from pathlib import Path

from memtune.config.reference import _section_model, config_markdown, estimator_reads
from memtune.config.schema import JobConfig

DOCS = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def _fields(model, prefix=""):
    for name, field in model.model_fields.items():
        section = _section_model(field.annotation)
        yield prefix + name, field
        if section is not None:
            yield from _fields(section, f"{prefix}{name}.")


def test_every_key_has_a_docstring():
    assert [key for key, field in _fields(JobConfig) if not field.description] == []


def test_docs_config_md_is_current():
    assert DOCS.read_text(encoding="utf-8") == config_markdown()


def test_estimator_reads_follow_derived_facts():
    read = estimator_reads()
    # read directly by the estimator
    assert "seq_length" in read
    # read only through Derived: fragmentation_margin -> allocator -> the environment variables
    assert "PYTORCH_ALLOC_CONF" in read
    # read only by the checks
    assert "megatron_core_version" not in read and "select" not in read
