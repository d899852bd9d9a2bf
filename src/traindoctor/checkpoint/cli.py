"""``traindoctor ckpt inspect PATH``: list a checkpoint's contents without executing it.

PATH is a torch file or a ``torch.distributed.checkpoint`` directory.

Exit codes: 0 safe and resumable (model and optimizer state present, nothing missing found),
1 findings (TD501-TD504), unsafe globals or not resumable, 2 unreadable or refused file (a limit
reached, not a regular file) or usage error. Never imports torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from traindoctor.checkpoint.inspect import (
    CheckpointReadError,
    Inspection,
    inspect_checkpoint,
)
from traindoctor.checkpoint.limits import LIMIT_NAMES, Limits, parse_limit
from traindoctor.finding import Finding, Origin
from traindoctor.registry import get_rule
from traindoctor.units import format_bytes

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
TENSORS_SHOWN = 40
UNSAFE_SHOWN = 50


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="traindoctor ckpt", description="Inspect checkpoints without executing them.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    insp = sub.add_parser("inspect", help="list contents, check safety and resumability")
    insp.add_argument(
        "file", metavar="PATH", help="a torch checkpoint file or a torch.distributed.checkpoint directory"
    )
    insp.add_argument("--output-format", choices=["text", "json"], default="text")
    insp.add_argument("--all", action="store_true", help=f"list every tensor (default: first {TENSORS_SHOWN})")
    defaults = Limits()
    insp.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="change a reading limit (repeatable); defaults: "
        + ", ".join(f"{n}={getattr(defaults, n)}" for n in LIMIT_NAMES),
    )
    return parser


def rng_line(result: Inspection) -> str:
    """Which generators are saved: torch CPU, CUDA (needed only with CUDA tensors), NumPy, Python."""
    present = {c.summary.split(" ")[0].lower() for c in result.components if c.kind == "rng"}
    cuda_needed = any(t.device.startswith("cuda") for _, t in result.tensors)
    parts = []
    for key, label in (("torch", "torch CPU"), ("cuda", "CUDA"), ("numpy", "NumPy"), ("python", "Python")):
        if key in present:
            parts.append(f"{label} present")
        elif key == "cuda" and not cuda_needed:
            parts.append("CUDA not needed (no CUDA tensors)")
        else:
            parts.append(f"{label} missing")
    return ", ".join(parts)


def findings_of(result: Inspection) -> list[Finding]:
    """The inspection's gaps as findings, each with its rule's name and severity."""
    out = []
    for gap in result.findings:
        rule = get_rule(gap.code)
        assert rule is not None, gap.code
        out.append(
            Finding(
                code=gap.code,
                name=rule.name,
                severity=rule.severity,
                message=gap.message,
                filename=gap.filename,
                location=None,
                origin=Origin.STATIC,
                evidence=gap.evidence,
            )
        )
    return out


def render_json(result: Inspection) -> str:
    """``--output-format json``: the inspection, its findings as the checker prints them."""
    data = result.to_dict()
    data["findings"] = [f.to_dict() for f in findings_of(result)]
    return json.dumps(data, indent=2, sort_keys=True, default=str)


def render_text(result: Inspection, show_all: bool = False) -> str:
    lines = [f"{result.path}: {result.format}, {format_bytes(result.size_bytes)}, {len(result.tensors)} tensors"]
    if result.safe:
        lines.append("safety: safe (every global is on torch's weights_only allowlist)")
    else:
        lines.append("safety: UNSAFE: the pickle references globals outside torch's weights_only allowlist;")
        lines.append("  torch.load(weights_only=False) or pickle.load would import and run them:")
        seen = set()
        for use in result.unsafe:
            use_key = (use.ref.dotted, use.called)
            if use_key in seen:
                continue
            seen.add(use_key)
            if len(seen) > UNSAFE_SHOWN:
                lines.append(f"    ... and more ({len(result.unsafe)} references in all)")
                break
            how = "called" if use.called else "referenced"
            dotted = " (a dotted name: pickle looks it up attribute by attribute)" if "." in use.ref.name else ""
            lines.append(f"    {use.ref.dotted[:200]}  ({how}, pickle offset {use.offset}){dotted}")
        lines.append("  (inspect imported and ran nothing from this file)")
    counters = []
    if result.step is not None:
        counters.append(f"step {result.step}")
    if result.epoch is not None:
        counters.append(f"epoch {result.epoch}")
    if counters:
        lines.append(", ".join(counters))
    if result.imports:
        lines.append("a whole pickled object: unpickling it imports (and runs code of) " + ", ".join(result.imports))
    if result.ranks:
        lines.append("")
        lines.append("ranks")
        lines.extend(f"  {line}" for line in result.ranks)
    lines.append("")
    lines.append("contents")
    if not result.components:
        lines.append("  (no model, optimizer, scheduler, scaler or RNG state recognised)")
    width = max([len(c.path) for c in result.components] + [10])
    for comp in result.components:
        lines.append(f"  {comp.path:<{width}}  {comp.summary}")
        lines.extend(f"  {'':<{width}}    {d}" for d in comp.details)
    if result.format == "torch zip" or result.format.startswith("DCP"):
        lines.append(f"  RNG states: {rng_line(result)}")
    lines.append("")
    shown = result.tensors if show_all else result.tensors[:TENSORS_SHOWN]
    global_shapes = " (global shapes)" if result.format.startswith("DCP") else ""
    lines.append(f"tensors ({len(result.tensors)}){global_shapes}")
    key_width = max([len(k) for k, _ in shown] + [10])
    for key, tensor in shown:
        shape = "[" + ", ".join(str(d) for d in tensor.shape) + "]"
        device = "" if tensor.device in ("cpu", "?") else f"  {tensor.device}"
        extra = "" if tensor.kind == "tensor" else f"  ({tensor.kind})"
        lines.append(
            f"  {key:<{key_width}}  {tensor.dtype:<8} {shape:<14} {format_bytes(tensor.nbytes):>10}{device}{extra}"
        )
    if len(shown) < len(result.tensors):
        lines.append(f"  ... {len(result.tensors) - len(shown)} more (use --all)")
    lines.append("")
    findings = findings_of(result)
    if findings:
        lines.append("findings")
        for f in findings:
            lines.append(f"  {f.filename}: {f.code} [{f.severity.value}] {f.name}")
            lines.append(f"      {f.message}")
            if f.evidence:
                ev = ", ".join(f"{k}={v}" for k, v in sorted(f.evidence.items()))
                lines.append(f"      evidence: {ev}")
        lines.append("")
    if not result.safe:
        verdict = "UNSAFE: do not load this file with pickle or torch.load(weights_only=False)"
    elif result.format != "torch zip" and not result.format.startswith("DCP"):
        verdict = "not a resumable torch checkpoint"
    elif findings:
        verdict = f"not fully resumable ({len(findings)} finding(s))"
    elif not result.resumable:
        kinds = {c.kind for c in result.components}
        lacking = " or ".join(k for k in ("model", "optimizer") if k not in kinds)
        verdict = f"not resumable: no {lacking} state found"
    else:
        verdict = "resumable: model, optimizer and RNG state present; nothing missing found"
    lines.append(verdict)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command != "inspect":
        parser.print_help()
        return EXIT_ERROR
    limits = Limits()
    try:
        for setting in args.limit:
            limits = parse_limit(setting, limits)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        result = inspect_checkpoint(args.file, limits)
    except CheckpointReadError as exc:
        if args.output_format == "json":
            print(json.dumps({"file": args.file, "error": str(exc)}, indent=2))
        else:
            print(f"traindoctor ckpt inspect: {args.file}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.output_format == "json":
        print(render_json(result))
    else:
        sys.stdout.write(render_text(result, args.all))
    return EXIT_OK if result.ok else EXIT_FINDINGS
