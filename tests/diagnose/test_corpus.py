"""Classification accuracy on the labelled public corpus (oom-corpus-public.jsonl).

Corpus labels map onto memtune's: nccl → outside_pytorch (NCCL's buffers live outside PyTorch's
allocator). 'other' holds failures that are none of the corpus's four causes: in the public share,
a driver-level "CUDA error: out of memory" (memory taken outside the caching allocator, which
memtune calls outside_pytorch) and Megatron's NCCL_GRAPH_REGISTER guard (configuration). So
'other' accepts configuration, not_oom or outside_pytorch, and nothing else.
"""

import json

import pytest

from memtune.diagnose import diagnose_text
from tests.diagnose.diagnose_samples import FIXTURES

ACCEPTED = {
    "capacity": {"capacity"},
    "fragmentation": {"fragmentation"},
    "nccl": {"outside_pytorch"},
    "host_oom": {"host_oom"},
    "other": {"configuration", "not_oom", "outside_pytorch"},
}
RECORDS = [
    json.loads(line)
    for line in (FIXTURES / "oom-corpus-public.jsonl").read_text().splitlines()
    if line.strip()
]


@pytest.mark.parametrize("record", RECORDS, ids=[r["source_url"].split("github.com/")[-1] for r in RECORDS])
def test_record(record):
    d = diagnose_text(record["excerpt"])
    assert d.verdict.label in ACCEPTED[record["kind"]], d.verdict.reasons


def test_accuracy_at_least_95_percent():
    right = sum(diagnose_text(r["excerpt"]).verdict.label in ACCEPTED[r["kind"]] for r in RECORDS)
    assert len(RECORDS) == 14
    assert right / len(RECORDS) >= 0.95
