"""benchmarks/gpu/run_matrix.py merge: a run whose measured steps did not update (the fp16 loss
scaler skipped them) never joins the set; one that did is taken with the matrix's config."""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json

from tests.measure.test_measured_set import SET_DIR

RUN_MATRIX = SET_DIR.parents[1] / "benchmarks" / "gpu" / "run_matrix.py"


def _run_matrix():
    # run_matrix.py puts the repository and the measured set's folder on its path itself.
    spec = importlib.util.spec_from_file_location("run_matrix", RUN_MATRIX)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_merge_refuses_a_run_whose_optimizer_skipped_a_measured_step(tmp_path, capsys):
    record = json.loads((SET_DIR / "h200-mcore0.19.2.jsonl").read_text().splitlines()[0])
    stepped, skipped = copy.deepcopy(record), copy.deepcopy(record)
    for it in stepped["measured"]["iterations"]:
        it["optimizer_stepped"] = True
    for it in skipped["measured"]["iterations"]:
        it["optimizer_stepped"] = it["iteration"] == 1  # only the first (unmeasured) step updated
    merge = _run_matrix().merge
    for result, taken in ((skipped, False), (stepped, True)):
        results, into = tmp_path / "results.jsonl", tmp_path / "set.jsonl"
        results.write_text(json.dumps(result) + "\n")
        into.unlink(missing_ok=True)
        merge(argparse.Namespace(results=[str(results)], plans=[], into=str(into), resume=False, save=False))
        merged = [json.loads(line) for line in into.read_text().splitlines()]
        assert [r["id"] for r in merged] == ([record["id"]] if taken else [])
        out = capsys.readouterr().out
        assert ("not taken, the optimizer skipped a measured step (fp16 loss scaler)" in out) != taken


def test_a_result_not_taken_leaves_the_earlier_record_of_that_run(tmp_path, capsys):
    record = json.loads((SET_DIR / "h200-mcore0.19.2.jsonl").read_text().splitlines()[0])
    rerun = copy.deepcopy(record)
    for it in rerun["measured"]["iterations"]:
        it["optimizer_stepped"] = False
    rerun["measured"]["peak_allocated_bytes"] += 1
    results, into = tmp_path / "results.jsonl", tmp_path / "set.jsonl"
    results.write_text(json.dumps(rerun) + "\n")
    into.write_text(json.dumps(record) + "\n")
    _run_matrix().merge(
        argparse.Namespace(results=[str(results)], plans=[], into=str(into), resume=False, save=False)
    )
    merged = [json.loads(line) for line in into.read_text().splitlines()]
    assert [r["measured"]["peak_allocated_bytes"] for r in merged] == [
        record["measured"]["peak_allocated_bytes"]
    ]
    assert "not taken, the optimizer skipped a measured step" in capsys.readouterr().out
