"""CallbackWatch: the start/stop/publish logic both framework callbacks share (plain torch loops)."""

from __future__ import annotations

import json
import logging

import torch
from torch import nn

import traindoctor
from traindoctor.integrations.callback_watch import CallbackWatch, finding_line, severity_counts


def _train_with_decayed_bias(steps: int = 3) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    for _ in range(steps):
        model(torch.randn(8, 4)).square().mean().backward()
        opt.step()
        opt.zero_grad()


def test_started_and_finished_by_hand_logs_prints_and_writes(tmp_path, caplog, capsys) -> None:
    path = tmp_path / "report.json"
    watch = CallbackWatch(report=str(path), select=["TD204"])
    logger = logging.getLogger("framework.traindoctor")
    watch.start(logger)
    watch.start(logger)  # a second start hook is a no-op
    _train_with_decayed_bias()
    with caplog.at_level(logging.INFO, logger="framework.traindoctor"):
        findings = watch.finish(logger, extra={"framework": "test"})
    assert [f.code for f in findings] == ["TD204"] and not watch.running
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and record.getMessage() == finding_line(findings[0])
    assert record.getMessage().startswith("traindoctor TD204 weight-decay-on-bias-norm: AdamW applies")
    report = json.loads(path.read_text())
    assert [f["code"] for f in report["findings"]] == ["TD204"]
    assert report["environment"]["framework"] == "test" and report["partial"] is False
    err = capsys.readouterr().err
    assert "traindoctor report" in err and "decayed: 4" in err
    assert severity_counts(findings) == {"error": 0, "warning": 1, "info": 0}
    assert watch.finish(logger) == findings  # finishing twice publishes once


def test_passive_inside_another_watch_and_partial_after_an_error(capsys) -> None:
    logger = logging.getLogger("framework.traindoctor")
    with traindoctor.watch(select=["TD204"]) as outer:
        inner = CallbackWatch(select=["TD204"], print_report=False)
        inner.start(logger)
        _train_with_decayed_bias()
        assert inner.passive and inner.finish(logger) == []
    assert [f.code for f in outer.findings] == ["TD204"]  # the outer watch reports, once

    watch = CallbackWatch(select=["TD204"], print_report=False)
    watch.start(logger)
    _train_with_decayed_bias()
    watch.partial = True  # what on_exception sets
    watch.finish(logger)
    assert watch.report is not None and watch.report["partial"] is True


def test_adapt_rewrites_findings_before_they_are_published(tmp_path) -> None:
    path = tmp_path / "r.json"
    watch = CallbackWatch(
        report=str(path), print_report=False, select=["TD204"], adapt=lambda f: f.with_(help="framework hint")
    )
    watch.start(logging.getLogger("x"))
    _train_with_decayed_bias()
    (finding,) = watch.finish(logging.getLogger("x"))
    assert finding.help == "framework hint"
    assert json.loads(path.read_text())["findings"][0]["help"] == "framework hint"
