"""`check --output-format sarif` against GitHub code scanning's ingestion requirements.

GitHub's "SARIF support for code scanning" page lists the properties code scanning needs beyond
the SARIF schema's minimum ("required": present and not empty) and the limits past which an upload
is rejected. :func:`github_problems` encodes that page; the produced SARIF must give none.
``partialFingerprints`` is required too, but GitHub's ``upload-sarif`` action (which the Action in
action.yml uses) computes it for every result whose primary location has a relative path to a
checked-out file and a start line: that is what is checked for it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema

from traindoctor.cli import main
from traindoctor.registry import all_rules
from traindoctor.report.sarif import MAX_DESCRIPTION, shorten

DATA = Path(__file__).parent / "data"
LEVELS = {"note", "warning", "error"}
#: GitHub's upload limits ("Runs per file" ... "Tags per rule").
LIMITS = {"runs": 20, "results": 25_000, "rules": 25_000, "locations": 1_000, "tags": 20}


def _text(obj: object, *path: str) -> str:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj if isinstance(obj, str) else ""


def github_problems(doc: dict, root: Path) -> list[str]:
    """Everything in ``doc`` that GitHub code scanning requires and does not get."""
    problems = []
    if not doc.get("$schema") or doc.get("version") != "2.1.0" or not isinstance(doc.get("runs"), list):
        problems.append("sarifLog: $schema, version 2.1.0 and runs[] are required")
    if len(doc.get("runs", [])) > LIMITS["runs"]:
        problems.append("too many runs")
    for run in doc.get("runs", []):
        driver = run.get("tool", {}).get("driver", {})
        if not driver.get("name") or not isinstance(driver.get("rules"), list):
            problems.append("toolComponent: name and rules[] are required")
        rules = driver.get("rules", [])
        if len(rules) > LIMITS["rules"]:
            problems.append("too many rules")
        for rule in rules:
            rid = rule.get("id") or "?"
            for path in (("shortDescription", "text"), ("fullDescription", "text"), ("help", "text")):
                if not _text(rule, *path).strip():
                    problems.append(f"rule {rid}: {'.'.join(path)} is required")
            for path in (("shortDescription", "text"), ("fullDescription", "text")):
                if len(_text(rule, *path)) > MAX_DESCRIPTION:
                    problems.append(f"rule {rid}: {'.'.join(path)} is over {MAX_DESCRIPTION} characters")
            if len(rule.get("name", "")) > 255:
                problems.append(f"rule {rid}: name is over 255 characters")
            if rule.get("defaultConfiguration", {}).get("level", "warning") not in LEVELS:
                problems.append(f"rule {rid}: defaultConfiguration.level must be note, warning or error")
            if len(rule.get("properties", {}).get("tags", [])) > LIMITS["tags"]:
                problems.append(f"rule {rid}: too many tags")
        results = run.get("results")
        if not isinstance(results, list):
            problems.append("run: results[] is required")
            continue
        if len(results) > LIMITS["results"]:
            problems.append("too many results")
        for i, result in enumerate(results):
            where = f"result {i} ({result.get('ruleId')})"
            if not _text(result, "message", "text").strip():
                problems.append(f"{where}: message.text is required")
            locations = result.get("locations") or []
            if not 1 <= len(locations) <= LIMITS["locations"]:
                problems.append(f"{where}: at least one location is required")
                continue
            physical = locations[0].get("physicalLocation", {})
            uri = _text(physical, "artifactLocation", "uri")
            if not uri:
                problems.append(f"{where}: artifactLocation.uri is required")
            elif "://" in uri or uri.startswith("/") or not (root / uri).is_file():
                problems.append(f"{where}: {uri} is not a relative path to a file of the repository")
            region = physical.get("region")
            if region is None and result.get("properties", {}).get("cell") is not None:
                continue  # a notebook cell's row is not a line of the file (see report/sarif.py)
            for key in ("startLine", "startColumn", "endLine", "endColumn"):
                if not isinstance((region or {}).get(key), int):
                    problems.append(f"{where}: region.{key} is required")
            if result.get("ruleId") and result.get("ruleIndex") is not None:
                if rules[result["ruleIndex"]].get("id") != result["ruleId"]:
                    problems.append(f"{where}: ruleIndex does not point at its rule")
    return problems


def schema_with_baseline_state() -> dict:
    """The schema subset the other SARIF tests use, plus the official ``result.baselineState``."""
    schema = copy.deepcopy(json.loads((DATA / "sarif-2.1.0-subset.schema.json").read_text()))
    schema["definitions"]["result"]["properties"]["baselineState"] = {"enum": ["new", "unchanged", "updated", "absent"]}
    return schema


def sarif_of(capsys, root: Path, *argv: str) -> dict:
    main(["check", "--min-torch-version", "2.13", "--output-format", "sarif", *argv, "."])
    out, _ = capsys.readouterr()
    return json.loads(out)


def test_a_projects_sarif_meets_githubs_requirements(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader\n"
        "loader = DataLoader(range(10), batch_size=2)\n"
        "model = torch.nn.Linear(2, 2).cuda()\nopt = torch.optim.AdamW(model.parameters())\n"
        "scaler = torch.cuda.amp.GradScaler()\n"
        "for epoch in range(2):\n    for x in loader:\n        loss = model(x).sum()\n        loss.backward()\n"
        "        opt.step()\n"
    )
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "broken.py").write_text("def f(:\n")  # TD000: a finding without an end
    doc = sarif_of(capsys, tmp_path)
    codes = {r["ruleId"] for r in doc["runs"][0]["results"]}
    assert {"TD000", "TD304"} <= codes and len(codes) >= 4
    assert github_problems(doc, tmp_path) == []
    jsonschema.validate(doc, json.loads((DATA / "sarif-2.1.0-subset.schema.json").read_text()))


def test_every_rule_descriptor_meets_githubs_requirements(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.py").write_text("x = 1\n")
    doc = sarif_of(capsys, tmp_path)
    assert len(doc["runs"][0]["tool"]["driver"]["rules"]) == len(all_rules())
    assert github_problems(doc, tmp_path) == []
    severities = {r["properties"]["problem.severity"] for r in doc["runs"][0]["tool"]["driver"]["rules"]}
    assert severities <= {"error", "warning", "recommendation"}


def test_baseline_sarif_meets_the_schema_and_githubs_requirements(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    (tmp_path / "b.json").write_text('{"traindoctor-baseline": 1, "findings": []}\n')
    doc = sarif_of(capsys, tmp_path, "--baseline", "b.json")
    assert [r["baselineState"] for r in doc["runs"][0]["results"]] == ["new"]
    assert github_problems(doc, tmp_path) == []
    jsonschema.validate(doc, schema_with_baseline_state())


def test_notebook_results_are_the_one_exception_to_regions(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    cells = [{**cell, "source": ["import torch\n"]}, {**cell, "source": ["scaler = torch.cuda.amp.GradScaler()\n"]}]
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    doc = sarif_of(capsys, tmp_path)
    assert [r["properties"]["cell"] for r in doc["runs"][0]["results"]] == [2]
    assert github_problems(doc, tmp_path) == []


def test_shorten_keeps_whole_sentences():
    text = "One sentence. " * 100
    short = shorten(text, 100)
    assert len(short) <= 100 and short.endswith("sentence.") and short.count("One") == 7
    words = shorten("word " * 100, 30)
    assert len(words) <= 30 and words.endswith("word…")
    assert shorten("short", 30) == "short"
