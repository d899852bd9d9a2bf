"""benchmarks/lsp_latency.py runs (a few edits of a small file; it is a benchmark, nothing is timed here)."""

from __future__ import annotations

import ast
import json

import pytest
from benchmark_scripts import benchmark_module

pytest.importorskip(
    "pygls", reason="the editor server's tests need the lsp extra: pip install 'traindoctor[lsp]'"
)  # the benchmark drives a real LSP client
pytest.importorskip("lsprotocol", reason="the editor server's tests need the lsp extra: pip install 'traindoctor[lsp]'")


def test_the_generated_module_is_a_training_module_of_the_size_asked():
    with benchmark_module("lsp_latency") as bench:
        text = bench.generate(5000)
        assert 5000 <= text.count("\n") < 5100
        ast.parse(text)
        assert "loss.backward()" not in text and "scaler.scale(loss).backward()" in text
        edit = bench.edit_at(text, 3)
        assert bench.retype(text, edit) != text and len(bench.retype(text, edit)) == len(text)


def test_the_benchmark_runs_end_to_end(tmp_path, capsys):
    with benchmark_module("lsp_latency") as bench:
        assert (
            bench.main(["--edits", "2", "--lines", "300", "--debounce-ms", "10", "--json", str(tmp_path / "r.json")])
            == 0
        )
    out = capsys.readouterr().out
    assert "2 edits" in out and "diagnostics after the debounce (10 ms)" in out
    result = json.loads((tmp_path / "r.json").read_text())
    assert len(result["latency_ms"]) == 2 and len(result["check_cpu_ms"]) == 2
