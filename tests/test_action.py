"""The GitHub Action (action.yml): its composite steps run here as a runner runs them.

:func:`run_action` reads action.yml and runs each ``shell: bash`` step with ``bash --noprofile
--norc -eo pipefail`` (the runner's command for ``shell: bash``), the step's ``env`` with its
``${{ }}`` expressions evaluated from the inputs, ``github.action_path``, ``runner.temp`` and the
earlier steps' outputs, and the runner's files (``GITHUB_OUTPUT``, ``GITHUB_PATH``,
``GITHUB_STEP_SUMMARY``). A ``uses:`` step (the SARIF upload) is not run: its condition is
evaluated and its inputs are recorded for the test to check. The install step runs for real once
(a virtual environment with traindoctor built from a copy of this checkout).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from test_sarif_github import github_problems

ROOT = Path(__file__).resolve().parent.parent
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
DEPRECATED = "scaler = torch.cuda.amp.GradScaler()\n"
_TOKEN = re.compile(r"\s*(?:'(?P<str>[^']*)'|(?P<op>==|!=|&&)|(?P<name>[A-Za-z_][\w.-]*))")


@dataclass
class StepResult:
    name: str
    ran: bool
    code: int = 0
    stdout: str = ""
    stderr: str = ""
    #: A ``uses:`` step: its inputs, evaluated.
    with_: dict[str, str] = field(default_factory=dict)


@dataclass
class ActionRun:
    steps: list[StepResult]
    outputs: dict[str, str]
    summary: str

    def step(self, name: str) -> StepResult:
        return next(s for s in self.steps if s.name == name)

    @property
    def failed(self) -> bool:
        return any(s.code != 0 for s in self.steps)


class Context:
    """What ``${{ }}`` expressions of this action can name."""

    def __init__(self, inputs: dict[str, str], action_path: Path, temp: Path) -> None:
        self.values = {"github.action_path": str(action_path), "runner.temp": str(temp)}
        self.values.update({f"inputs.{k}": v for k, v in inputs.items()})

    def evaluate(self, expression: str) -> str | bool:
        """``a``, ``'text'``, ``a == 'b'``, ``a != ''``, joined by ``&&`` (all this action uses)."""
        tokens = []
        position = 0
        expression = expression.strip()
        while position < len(expression):
            match = _TOKEN.match(expression, position)
            assert match and match.end() > position, f"unsupported expression: {expression}"
            tokens.append(match)
            position = match.end()
        terms: list[list[str | tuple[str]]] = [[]]  # operands and (operator,) per && term
        for token in tokens:
            if token.group("op") == "&&":
                terms.append([])
            elif token.group("op"):
                terms[-1].append((token.group("op"),))
            elif token.group("str") is not None:
                terms[-1].append(token.group("str"))
            else:
                terms[-1].append(self.values.get(token.group("name"), ""))
        values: list[str | bool] = []
        for term in terms:
            if len(term) == 1 and isinstance(term[0], str):
                values.append(term[0])
            else:
                left, (op,), right = term
                values.append((left == right) if op == "==" else (left != right))
        return values[0] if len(values) == 1 else all(bool(v) for v in values)

    def substitute(self, text: str) -> str:
        return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(self.evaluate(m.group(1))), text)


@dataclass(frozen=True)
class Runner:
    """A runner's temp folder and the action's checkout (``github.action_path``)."""

    temp: Path
    checkout: Path

    @property
    def venv(self) -> Path:
        return self.temp / "traindoctor-venv"


def run_action(inputs: dict[str, str], workspace: Path, runner: Runner, install: bool = False) -> ActionRun:
    """Run action.yml's steps with ``inputs`` in ``workspace``; without ``install`` the install
    step is skipped and the virtual environment an earlier run made is used."""
    temp = runner.temp
    defaults = {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()}
    context = Context({**defaults, **inputs}, runner.checkout, temp)
    files = {name: temp / name.lower() for name in ("GITHUB_OUTPUT", "GITHUB_PATH", "GITHUB_STEP_SUMMARY")}
    for path in files.values():
        path.write_text("")
    if not install:
        files["GITHUB_PATH"].write_text(str(runner.venv / "bin") + "\n")
    results = []
    for step in ACTION["runs"]["steps"]:
        condition = step.get("if")
        if (not install and step["name"] == "Install traindoctor") or (
            condition is not None and not context.evaluate(condition.strip().removeprefix("${{").removesuffix("}}"))
        ):
            results.append(StepResult(step["name"], ran=False))
            continue
        if "uses" in step:
            evaluated = {k: context.substitute(str(v)) for k, v in step.get("with", {}).items()}
            results.append(StepResult(step["name"], ran=True, with_=evaluated))
            continue
        assert step["shell"] == "bash"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
        env.update({k: str(v) for k, v in files.items()})
        env["GITHUB_ACTION_PATH"] = str(runner.checkout)
        env.update({k: context.substitute(str(v)) for k, v in step.get("env", {}).items()})
        extra = [line for line in files["GITHUB_PATH"].read_text().splitlines() if line]
        env["PATH"] = os.pathsep.join([*reversed(extra), env["PATH"]])
        script = temp / "step.sh"
        script.write_text(step["run"])
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        results.append(StepResult(step["name"], True, done.returncode, done.stdout, done.stderr))
        for line in files["GITHUB_OUTPUT"].read_text().splitlines():
            name, _, value = line.partition("=")
            if step.get("id"):
                context.values[f"steps.{step['id']}.outputs.{name}"] = value
        if done.returncode != 0:
            break  # a failed step ends the job
    outputs = {name: context.substitute(spec["value"]) for name, spec in ACTION["outputs"].items()}
    return ActionRun(results, outputs, files["GITHUB_STEP_SUMMARY"].read_text())


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Runner:
    """A runner whose virtual environment the install step made (run for real, from a copy of
    this checkout as ``uses: owner/traindoctor@ref`` would have it)."""
    checkout = tmp_path_factory.mktemp("action") / "traindoctor"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md", "action.yml"):
        shutil.copy(ROOT / name, checkout / name)
    shutil.copytree(ROOT / "src", checkout / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    runner = Runner(tmp_path_factory.mktemp("runner-temp"), checkout)
    workspace = tmp_path_factory.mktemp("workspace")
    (workspace / "ok.py").write_text("x = 1\n")
    run = run_action({"python": sys.executable}, workspace, runner, install=True)
    install = run.step("Install traindoctor")
    assert install.ran and install.code == 0, install.stderr
    assert install.stdout.strip() == "traindoctor 0.1.0"
    assert run.outputs["exit-code"] == "0" and not run.failed
    return runner


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.traindoctor]\n")
    (tmp_path / "train.py").write_text("import torch\n" + DEPRECATED)
    (tmp_path / "other.py").write_text("import torch\nx = 1\n" + DEPRECATED)
    return tmp_path


def test_findings_fail_the_job_with_annotations_and_a_valid_sarif(installed, project):
    run = run_action({}, project, installed)
    check = run.step("Run traindoctor check")
    annotations = [line for line in check.stdout.splitlines() if line.startswith("::")]
    assert annotations == [
        "::notice file=other.py,line=3,col=10,endLine=3,endColumn=35,title=TD304 (deprecated-amp-api)::"
        + annotations[0].split("::", 2)[2],
        annotations[1],
    ]
    assert annotations[1].startswith("::notice file=train.py,line=2,col=10,")
    assert run.outputs == {"sarif-file": "traindoctor.sarif", "findings": "2", "exit-code": "1"}
    assert "traindoctor: 2 finding(s)" in run.summary
    assert not run.step("Upload the SARIF report to code scanning").ran
    fail = run.step("Fail on findings")
    assert fail.ran and fail.code == 1
    doc = json.loads((project / "traindoctor.sarif").read_text())
    assert [r["ruleId"] for r in doc["runs"][0]["results"]] == ["TD304", "TD304"]
    assert github_problems(doc, project) == []


def test_upload_gets_the_sarif_and_the_category(installed, project):
    run = run_action({"upload-sarif": "true", "category": "training-code"}, project, installed)
    upload = run.step("Upload the SARIF report to code scanning")
    assert upload.ran and upload.with_ == {"sarif_file": "traindoctor.sarif", "category": "training-code"}
    assert (project / upload.with_["sarif_file"]).is_file()
    step = next(s for s in ACTION["runs"]["steps"] if s["name"] == upload.name)
    assert step["uses"].startswith("github/codeql-action/upload-sarif@v")


def test_fail_on_findings_false_and_a_clean_tree_pass(installed, project, tmp_path_factory):
    run = run_action({"fail-on-findings": "false"}, project, installed)
    assert run.outputs["exit-code"] == "1" and not run.failed
    clean = tmp_path_factory.mktemp("clean")
    (clean / "ok.py").write_text("x = 1\n")
    run = run_action({"upload-sarif": "true"}, clean, installed)
    assert run.outputs == {"sarif-file": "traindoctor.sarif", "findings": "0", "exit-code": "0"} and not run.failed
    assert run.step("Upload the SARIF report to code scanning").ran  # an empty report closes old alerts


def test_args_are_split_like_a_shell_and_the_baseline_applies(installed, project):
    (project / "my dir").mkdir()
    (project / "my dir" / "x.py").write_text("import torch\n" + DEPRECATED)
    run = run_action({"args": "'my dir/x.py' --select TD3 --output-format json"}, project, installed)
    assert run.outputs["findings"] == "1" and "my dir/x.py" in run.step("Run traindoctor check").stdout
    subprocess.run(
        [installed.venv / "bin" / "traindoctor", "check", ".", "--write-baseline", "b.json"],
        cwd=project,
        check=True,
        capture_output=True,
    )
    (project / "new.py").write_text("import torch\n" + DEPRECATED)
    run = run_action({"baseline": "b.json", "annotations": "false"}, project, installed)
    assert run.outputs["findings"] == "1" and run.outputs["exit-code"] == "1"
    assert "new.py:2:10: TD304" in run.step("Run traindoctor check").stdout
    results = json.loads((project / "traindoctor.sarif").read_text())["runs"][0]["results"]
    assert [r["baselineState"] for r in results] == ["new"]


def test_a_usage_error_fails_the_job_whatever_fail_on_findings_says(installed, project):
    run = run_action({"args": ". --select NOPE", "fail-on-findings": "false"}, project, installed)
    assert run.outputs == {"sarif-file": "", "findings": "", "exit-code": "2"}
    assert not run.step("Upload the SARIF report to code scanning").ran
    fail = run.step("Fail on findings")
    assert fail.code == 2 and "::error title=traindoctor::traindoctor check could not run" in fail.stdout


def test_inputs_never_reach_a_script_unquoted():
    """Every ``${{ }}`` of a ``run:`` step goes through ``env:`` (no script injection from inputs)."""
    for step in ACTION["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step["name"]
    assert ACTION["runs"]["using"] == "composite"
