"""`longca compare BASE NEW`: the comparison of `longca_cli.compare` as markdown, JSON or an HTML page;
exit code 1 when the gate fails (a case slower than the threshold with confidence, or broken)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from longca.errors import LongcaError
from longca.sizes import format_size

LABEL_ORDER = {"broken": 0, "slower": 1, "now refused": 2, "not installed in NEW": 3, "no spread recorded": 4,
               "same within noise": 5, "faster": 6, "now runs": 7, "runs in neither": 8}


def parse_threshold(text: str) -> float:
    """'3%' or '3' -> 0.03 (percent)."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise LongcaError(f"malformed --threshold {text!r}; expected a percentage, e.g. 3%") from None
    if not 0 <= value < 100:
        raise LongcaError(f"--threshold must be between 0% and 100%, got {text!r}")
    return value / 100


def _r(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _tf(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def markdown(cmp: Any, base: Path, new: Path) -> str:
    out = [f"# longca compare: {new} against {base}\n",
           "Ratio = NEW speed / BASE speed (base time / new time): above 1 is faster. "
           f"{cmp.confidence:.0%} interval per case; `faster`/`slower` when the whole interval is above/below 1, "
           f"else `same within noise`. **Gate**: fails on a case whose interval lies below "
           f"{1 - cmp.threshold:.3g} (slower by more than {cmp.threshold:.1%} with confidence), or that was ok "
           "and now errs, runs out of memory, times out or is wrong.\n"]
    failed = cmp.failed
    out.append(f"**Result: {'FAIL' if failed else 'pass'}**: {len(failed)} of {len(cmp.cases)} matched cases fail "
               f"the gate; {len(cmp.only_base)} cases only in BASE, {len(cmp.only_new)} only in NEW.\n")
    c = cmp.control
    out += ["## Control: the machine\n", "| | BASE | NEW | ratio |", "|---|---|---|---|",
            f"| {c['what']} | {_r(c['base'], 0) or 'not measured'} | {_r(c['new'], 0) or 'not measured'} "
            f"| {_r(c['ratio'])} |", ""]
    if not c.get("ratio"):
        out.append("Without a control in both runs (CPU runs, `longca run`), a change of the machine or of its "
                   "load cannot be told from a kernel change: compare runs made back to back on one idle machine.\n")
    if c.get("machine_changed"):
        out.append(f"**The machine changed**: its matmul peak moved by {abs(c['ratio'] - 1):.1%}, more than the "
                   "threshold, so kernel ratios include the machine's; `÷ control` divides it out.\n")
    for side in ("base", "new"):
        envs = cmp.environments.get(side) or []
        if envs:
            e = envs[-1]
            parts = [e.get("device"), *(f"{k} {e[k]}" for k in ("driver", "torch", "cudnn", "longca", "commit", "date")
                                        if e.get(k))]
            out.append(f"{side.upper()} ({len(envs)} run records, the last): " + ", ".join(filter(None, parts)) + ".\n")
    for by in ("kernel", "mask"):
        out += [f"## Geometric mean of the ratios per {by}\n", f"| {by} | geomean | cases | labels |",
                "|---|---|---|---|"]
        for key, g in cmp.geomeans(by).items():
            ordered = sorted(g["labels"].items(), key=lambda kv: LABEL_ORDER.get(kv[0], 9))
            labels = ", ".join(f"{n} {lab}" for lab, n in ordered)
            out.append(f"| {key} | {_r(g['geomean'])} | {g['cases']} | {labels} |")
        out.append("")
    out += ["## Cases\n", ("| kernel | mask | seqlen | direction | heads | d | dtype | BASE TFLOP/s | NEW TFLOP/s "
                           "| ratio | interval | ÷ control | label | gate |"), "|" + "---|" * 14]
    for case in sorted(cmp.cases, key=lambda c: (LABEL_ORDER.get(c.label, 9), c.ratio or 0)):
        d = case.as_dict()
        interval = f"{_r(d['ci_low'])}-{_r(d['ci_high'])}" if d["ci_low"] is not None else ""
        base_tf = _tf(d["base_tflops"]) or d["base_status"]
        new_tf = _tf(d["new_tflops"]) or d["new_status"]
        out.append(f"| {d['kernel']} | {d['mask']} | {format_size(d['seqlen'])} | {d['direction']} | {d['heads']} | "
                   f"{d['head_dim']} | {d['dtype']} | {base_tf} | {new_tf} | {_r(d['ratio'])} | {interval} | "
                   f"{_r(d['normalised_ratio'])} | {d['label']} | {'FAIL' if d['gate'] else ''} |")
    methods = sorted({c.method for c in cmp.cases if c.ratio is not None})
    out.append("\nIntervals: " + "; ".join(methods) + "." if methods else "")
    return "\n".join(out) + "\n"


def html_page(cmp: Any, base: Path, new: Path, text: str) -> str:
    from .html import markdown_to_html, page

    intro_md = text.split("## Cases")[0]
    rows = []
    for case in cmp.cases:
        d = case.as_dict()
        rows.append({**d, "state": d["label"], "record": {"base": case.base, "new": case.new, "comparison": d}})
    columns = [{"key": k, "label": lab, **({"num": True, "digits": dg, "small": dg == 1} if dg is not None else {})}
               for k, lab, dg in [
        ("kernel", "kernel", None), ("mask", "mask", None), ("seqlen", "seqlen", None),
        ("direction", "direction", None),
        ("heads", "heads", None), ("dtype", "dtype", None), ("base_tflops", "BASE TFLOP/s", 1),
        ("new_tflops", "NEW TFLOP/s", 1), ("ratio", "ratio", 3), ("ci_low", "low", 3), ("ci_high", "high", 3),
        ("normalised_ratio", "÷ control", 3), ("state", "label", None), ("gate", "gate fails", None)]]
    filters = [{"key": k, "label": k} for k in ("mask", "seqlen", "kernel", "direction", "dtype", "heads", "state")]
    return page(f"longca compare {new} vs {base}", markdown_to_html([intro_md]), rows, columns, filters)


def compare(
    base: Path = typer.Argument(..., help="results folder (or results.jsonl) to compare against"),
    new: Path = typer.Argument(..., help="results folder (or results.jsonl) to compare"),
    threshold: str = typer.Option("3%", help="the gate fails on a case slower than this with confidence"),
    confidence: float = typer.Option(0.95, min=0.5, max=0.999, help="confidence of the intervals"),
    fmt: str = typer.Option("markdown", "--format", "-f", help="markdown, json or html"),
    output: Path | None = typer.Option(None, help="write to this file instead of stdout"),
) -> None:
    """Compare two runs case by case: ratio with a confidence interval, faster / slower / same within
    noise, geometric means, a machine control; exit 1 when a case is slower than --threshold."""
    from longca_cli.analysis import load
    from longca_cli.compare import compare as compare_runs
    from longca_runner.outdir import check_file_path, write_text_file

    if fmt not in ("markdown", "json", "html"):
        raise LongcaError(f"unknown format {fmt!r}; known: markdown, json, html")
    if output:
        check_file_path(output)  # before reading either run
    cmp = compare_runs(load(base), load(new), parse_threshold(threshold), confidence)
    if not cmp.cases:
        raise LongcaError(f"no case of {new} was measured in {base}")
    text = markdown(cmp, base, new)
    body = {"markdown": lambda: text, "json": lambda: json.dumps(cmp.as_dict(), indent=1, default=str) + "\n",
            "html": lambda: html_page(cmp, base, new, text)}[fmt]()
    if output:
        write_text_file(output, body)
        typer.echo(f"wrote {output}", err=True)
    else:
        typer.echo(body, nl=False)
    verdict = f"{len(cmp.failed)} of {len(cmp.cases)} cases fail the gate (threshold {threshold})"
    typer.echo(verdict if cmp.failed else f"pass: {verdict}", err=True)
    if cmp.failed:
        raise typer.Exit(1)
