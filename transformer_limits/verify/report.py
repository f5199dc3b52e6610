"""Experiment reports: ``results.json``, ``report.md`` (+ PNG figures) and a self-contained ``report.html``.

:func:`write_experiment_report` writes one experiment's folder, :func:`write_index` the index of a
``report`` run (``index.md``, ``index.html``, ``summary.json``; each experiment lives in
``out_dir/<name>/``).  Every folder is written through
:func:`transformer_limits.atomic_write.staged_directory`: files are built in a staging folder and
moved in with atomic renames only once all of them exist, so a crash never leaves a half-written
report.  The ``results.json`` schema is documented in ``docs/reports.md``; :func:`results_payload`
builds it (``verify --format json`` prints the same object).
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Sequence

from transformer_limits.atomic_write import replaced_directory, staged_directory
from transformer_limits.jsonable import jsonable
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
from transformer_limits.verify.provenance import config_hash, environment, run_provenance

__all__ = [
    "RESULTS_SCHEMA_VERSION",
    "config_hash",
    "environment",
    "check_counts",
    "check_state",
    "results_payload",
    "summary_counts",
    "write_experiment_report",
    "write_index",
]

RESULTS_SCHEMA_VERSION = 1


# ------------------------------------------------------------------------------------------------
# results.json
# ------------------------------------------------------------------------------------------------


def _figure_file(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip(".-") or "figure"
    return f"{stem}.png"


def results_payload(result: ExperimentResult, experiment: Experiment, config: ExperimentConfig) -> dict:
    """The ``results.json`` object (plain JSON types; NaN and ±inf become ``null``)."""
    payload = {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "experiment": experiment.name,
        "title": experiment.title,
        "paper": experiment.paper,
        "claim": experiment.claim,
        "derivations": list(experiment.derivations),
        "profile": result.profile,
        "status": result.status,
        "passed": result.passed,
        "error": result.error,
        "checks": [c.to_dict() for c in result.checks],
        "fits": result.fits,
        "tables": result.tables,
        "figures": [{"name": f.name, "file": _figure_file(f.name), "caption": f.caption}
                    for f in result.figures],
        "notes": list(result.notes),
        "data": result.data,
        "provenance": run_provenance(result, experiment, config),
    }
    return jsonable(payload)


def _dumps(payload: Any) -> str:
    return json.dumps(payload, indent=2, allow_nan=False) + "\n"


# ------------------------------------------------------------------------------------------------
# formatting helpers (shared by Markdown and HTML)
# ------------------------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "—" if not math.isfinite(value) else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return json.dumps(value, default=str)
    return str(value)


def _interval(ci: Sequence[Any]) -> str:
    low, high = ci
    return f"[{'-inf' if low is None else _fmt(low)}, {'inf' if high is None else _fmt(high)}]"


#: how each state reads in report tables (a failure and an undecided check stand out)
_STATE_CELL = {"pass": "pass", "inconclusive": "INCONCLUSIVE", "fail": "FAIL", "error": "ERROR"}


def check_state(check: dict) -> str:
    """A check's state (entries written before states existed: pass or fail)."""
    return check.get("state") or ("pass" if check["passed"] else "fail")


def _check_rows(checks: list[dict]) -> tuple[list[str], list[list[str]], list[str]]:
    """Head, rows and each row's state (``pass``/``inconclusive``/``fail``) of a checks table."""
    head = ["check", "verdict", "claim", "expected", "measured", "CI", "α", "power", "alternative", "note"]
    rows = [[c["name"], _STATE_CELL[check_state(c)], c["claim"], _fmt(c["expected"]),
             _fmt(c["measured"]), _interval(c["ci"]), _fmt(c.get("statistics", {}).get("alpha")),
             "not stated" if c.get("power") is None else f"{c['power']:.2f}", c.get("alternative", ""),
             c.get("note", "")] for c in checks]
    return head, rows, [check_state(c) for c in checks]


def _table_columns(rows: list[dict]) -> list[str]:
    cols: list[str] = []
    for row in rows:
        cols.extend(k for k in row if k not in cols)
    return cols


def _fit_summary(fit: Any) -> str:
    """One line for a fit dict with ``exponent`` (and ``exponent_ci``), else compact JSON."""
    if isinstance(fit, dict) and "exponent" in fit:
        text = f"exponent {_fmt(fit['exponent'])}"
        if fit.get("exponent_ci"):
            conf = fit.get("confidence")
            text += (f", {conf:.0%} CI " if isinstance(conf, (int, float)) else ", CI ") \
                + _interval(fit["exponent_ci"])
        if "constant" in fit:
            text += f"; constant {_fmt(fit['constant'])}"
        return text
    if isinstance(fit, dict) and "constants" in fit:  # a multi-term (NNLS) fit
        cis = fit.get("constants_ci") or {}
        claim = fit.get("claim", {})
        parts = [f"{k} = {_fmt(v)}" + (f" {_interval(cis[k])}" if k in cis else "")
                 for k, v in fit["constants"].items()]
        head = f"{claim.get('expression', 'multi-term fit')}: " if isinstance(claim, dict) else ""
        return head + ", ".join(parts)
    if isinstance(fit, dict) and any(isinstance(v, dict) for v in fit.values()):
        return "; ".join(f"{k}: {_fit_summary(v) if isinstance(v, dict) else _fmt(v)}" for k, v in fit.items())
    text = json.dumps(fit, default=str)
    return text if len(text) <= 300 else text[:300] + " … (full fit in results.json)"


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md_escape(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return lines


def _status(payload: dict) -> str:
    """``pass``, ``inconclusive``, ``fail`` or ``error`` (payloads written before the crash state
    have no status)."""
    return payload.get("status") or ("pass" if payload["passed"] else "fail")


def _summary_line(payload: dict) -> str:
    run_s = payload["provenance"].get("timings", {}).get("run_s")
    when = f", {run_s:.1f} s" if isinstance(run_s, (int, float)) else ""
    status = _status(payload)
    if status == "error":
        return f"ERROR — the experiment crashed: {payload.get('error')} (profile {payload['profile']}{when})"
    return f"{_STATE_CELL[status].upper()} — {check_counts(payload['checks'])} (profile {payload['profile']}{when})"


def check_counts(checks: list[dict]) -> str:
    """``3/4 checks passed, 1 inconclusive`` (zero counts of the other states left out) for a list of
    ``results.json`` check entries."""
    states = [check_state(c) for c in checks]
    text = f"{states.count('pass')}/{len(states)} checks passed"
    for state, word in (("inconclusive", "inconclusive"), ("fail", "failed")):
        if state in states:
            text += f", {states.count(state)} {word}"
    return text


# ------------------------------------------------------------------------------------------------
# report.md
# ------------------------------------------------------------------------------------------------


def _markdown(payload: dict) -> str:
    out = [f"# {payload['title']} (`{payload['experiment']}`)", "",
           f"**{_summary_line(payload)}** · paper {payload['paper']}", "",
           "## Claim", "", payload["claim"], ""]
    if payload["derivations"]:
        out += ["## Derivations", ""]
        out += [f"- [{d}](derivations/{d}.md) (`transformer-limits derive {d}`)"
                for d in payload["derivations"]] + [""]
    head, rows, _ = _check_rows(payload["checks"])
    out += ["## Checks", ""] + _md_table(head, rows) + [""]
    if payload["fits"]:
        out += ["## Fits", ""] + [f"- **{k}**: {_fit_summary(v)}" for k, v in payload["fits"].items()] + [""]
    for name, rows_ in payload["tables"].items():
        cols = _table_columns(rows_)
        out += [f"## Table: {name}", ""]
        out += _md_table(cols, [[_fmt(r.get(c)) for c in cols] for r in rows_]) + [""]
    if payload["figures"]:
        out += ["## Figures", ""]
        for fig in payload["figures"]:
            out += [f"![{fig['caption']}]({fig['file']})", "", f"*{fig['caption']}*", ""]
    if payload["notes"]:
        out += ["## Notes", ""]
        for note in payload["notes"]:
            out += (["```", note.rstrip(), "```"] if "\n" in note else [f"- {note}"])
        out += [""]
    prov = payload["provenance"]
    out += ["## Provenance", "",
            f"- config hash `{prov['config_hash']}`; config `{json.dumps(prov['config'])}`",
            f"- seeds `{json.dumps(prov.get('seeds'))}`",
            f"- git commit `{prov.get('git_commit') or 'not in a git checkout'}`",
            "- versions " + ", ".join(f"{k} {v}" for k, v in prov["versions"].items()),
            f"- timings `{json.dumps(prov.get('timings'))}`",
            "", "Full data: `results.json`.", ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------
# report.html (self-contained)
# ------------------------------------------------------------------------------------------------

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.88em}
th,td{border:1px solid #ccc;padding:.3em .55em;text-align:left;vertical-align:top}
th{background:#f3f3f3}tr.pass td{background:#eaf7ea}tr.fail td{background:#fbe3e3}
.verdict{display:inline-block;padding:.2em .6em;border-radius:4px;font-weight:bold;color:#fff}
.verdict.pass{background:#2e7d32}.verdict.fail{background:#c62828}.verdict.error{background:#e65100}
.verdict.inconclusive{background:#8d6e00}
tr.error td{background:#fdecd9}tr.inconclusive td{background:#fff6d5}
pre{background:#f7f7f7;border:1px solid #e2e2e2;padding:.6em;overflow-x:auto;font-size:.85em}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}figcaption{font-style:italic;font-size:.9em}
code{background:#f3f3f3;padding:0 .2em}.small{font-size:.85em;color:#555}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _html_table(head: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>")
    return "".join(out) + "</table>"


def _html_page(title: str, body: list[str]) -> str:
    from transformer_limits.mathml import MATH_CSS  # formulas are MathML: typeset without scripts

    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{_CSS}{MATH_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _verdict_badge(passed: bool | str, text: str) -> str:
    """A coloured badge; ``passed`` is a bool or a status (``pass``/``inconclusive``/``fail``/``error``)."""
    cls = passed if isinstance(passed, str) else ("pass" if passed else "fail")
    return f'<span class="verdict {cls}">{_e(text)}</span>'


def _html(payload: dict, pngs: dict[str, bytes]) -> str:
    # rate parts of the claims typeset as MathML (docs/reports.md); report.md keeps the plain text
    from transformer_limits.verify.claim_markup import claim_html

    body = [f"<h1>{_e(payload['title'])} (<code>{_e(payload['experiment'])}</code>)</h1>",
            f"<p>{_verdict_badge(_status(payload), _summary_line(payload))} "
            f"<span class=\"small\">paper {_e(payload['paper'])}</span></p>",
            "<h2>Claim</h2>", f"<p>{claim_html(payload['claim'])}</p>"]
    if payload["derivations"]:
        body += ["<h2>Derivations</h2>", "<ul>"] + [
            f'<li><a href="derivations/{_e(d)}.html">{_e(d)}</a> '
            f'(<a href="derivations/{_e(d)}.md">Markdown</a>; '
            f'<code>transformer-limits derive {_e(d)}</code>)</li>' for d in payload["derivations"]] + ["</ul>"]
    head, rows, states = _check_rows(payload["checks"])
    table = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for row, state in zip(rows, states):  # as _html_table, with the claim column (index 2) typeset
        cells = [claim_html(c) if j == 2 else _e(c) for j, c in enumerate(row)]
        table.append(f'<tr class="{state}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    body += ["<h2>Checks</h2>", "".join(table) + "</table>"]
    if payload["fits"]:
        body += ["<h2>Fits</h2>", "<ul>"] + [
            f"<li><b>{_e(k)}</b>: {_e(_fit_summary(v))}<details><summary>data</summary>"
            f"<pre>{_e(json.dumps(v, indent=1))}</pre></details></li>" for k, v in payload["fits"].items()]
        body.append("</ul>")
    for name, rows_ in payload["tables"].items():
        cols = _table_columns(rows_)
        body += [f"<h2>Table: {_e(name)}</h2>", _html_table(cols, [[_fmt(r.get(c)) for c in cols] for r in rows_])]
    if payload["figures"]:
        body.append("<h2>Figures</h2>")
        for fig in payload["figures"]:
            data = base64.b64encode(pngs[fig["file"]]).decode("ascii")
            body.append(f'<figure><img alt="{_e(fig["caption"])}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{_e(fig['caption'])}</figcaption></figure>")
    if payload["notes"]:
        body += ["<h2>Notes</h2>"] + [f"<pre>{_e(n)}</pre>" if "\n" in n else f"<p>{_e(n)}</p>"
                                      for n in payload["notes"]]
    body += ["<h2>Provenance</h2>", f"<pre>{_e(json.dumps(payload['provenance'], indent=1))}</pre>"]
    return _html_page(f"{payload['experiment']}: {payload['title']}", body)


# ------------------------------------------------------------------------------------------------
# writers
# ------------------------------------------------------------------------------------------------


def write_experiment_report(result: ExperimentResult, out_dir: str | os.PathLike, experiment: Experiment,
                            config: ExperimentConfig) -> dict:
    """Write ``results.json``, ``report.md``, ``report.html`` and one PNG per figure into ``out_dir``.

    All files are staged inside ``out_dir`` and moved in together, replacing an earlier report there as
    a whole (its PNGs and derivation pages included; other files are kept), see
    :func:`transformer_limits.atomic_write.replaced_directory`.  Returns the ``results.json`` payload.
    """
    payload = results_payload(result, experiment, config)
    pngs = {}
    for fig, entry in zip(result.figures, payload["figures"]):
        if entry["file"] in pngs or entry["file"] in ("results.json", "report.md", "report.html"):
            raise ValueError(f"figure name {fig.name!r} is used twice in {experiment.name}")
        pngs[entry["file"]] = fig.png
    with replaced_directory(out_dir, owned=experiment_report_entries) as stage:
        (stage / "results.json").write_text(_dumps(payload), encoding="utf-8")
        (stage / "report.md").write_text(_markdown(payload), encoding="utf-8")
        (stage / "report.html").write_text(_html(payload, pngs), encoding="utf-8")
        for name, png in pngs.items():
            (stage / name).write_bytes(png)
        _write_derivation_pages(stage, experiment.derivations)
    return payload


_EXPERIMENT_FILES = ("results.json", "report.md", "report.html", "derivations")
_INDEX_FILES = ("index.md", "index.html", "summary.json")


def experiment_report_entries(out_dir: Path) -> list[str]:
    """Top-level entries of an experiment report folder that an earlier report wrote (replaced as a
    whole by the next one): its fixed files, its ``derivations/`` pages and every ``*.png``."""
    return [*_EXPERIMENT_FILES, *(p.name for p in Path(out_dir).glob("*.png"))]


def report_entries(out_dir: Path) -> list[str]:
    """Top-level entries of a ``report`` folder written earlier: the index files and the experiment
    folders its ``summary.json`` lists (only folders holding a ``results.json``: never a user's folder)."""
    out = Path(out_dir)
    names = list(_INDEX_FILES)
    try:
        old = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        listed = [e.get("name") for e in old.get("experiments", [])]
    except (OSError, ValueError, AttributeError, TypeError):
        listed = []
    for name in listed:
        if (isinstance(name, str) and name and "/" not in name and "\\" not in name and not name.startswith(".")
                and (out / name / "results.json").is_file()):
            names.append(name)
    return names


def _write_derivation_pages(stage: Path, names: Sequence[str]) -> None:
    """The derivations an experiment rests on, as Markdown and as HTML with MathML formulas next to
    the report (links stay local; the kernel sources are not copied, so neither page lists them)."""
    from transformer_limits.symbolic.derivation_cache import derivation_pages

    for name in names:
        page = stage / "derivations" / f"{name}.md"
        page.parent.mkdir(exist_ok=True)
        markdown, html = derivation_pages(name)  # cached on disk: no SymPy on a warm run
        page.write_text(markdown, encoding="utf-8")
        page.with_suffix(".html").write_text(html, encoding="utf-8")


def summary_counts(summary: dict) -> str:
    """``7/9 experiments passed, 1 inconclusive, 1 failed, 0 crashed`` (zero counts left out) of a
    ``summary.json`` payload."""
    text = f"{summary['n_passed']}/{summary['n_experiments']} experiments passed"
    for key, word in (("n_inconclusive", "inconclusive"), ("n_failed", "failed"), ("n_errors", "crashed")):
        if summary.get(key):
            text += f", {summary[key]} {word}"
    return text


def write_index(results: Sequence[tuple[Experiment, ExperimentResult]], out_dir: str | Path,
                profile: str, not_run: Sequence[dict] = ()) -> dict:
    """Write ``index.md``, ``index.html`` and ``summary.json`` for a ``report`` run into ``out_dir``
    (experiment reports in ``out_dir/<name>/``); returns the ``summary.json`` payload.

    ``not_run``: the registered experiments that did not run, each ``{name, title, paper, reason, ...}``
    (``commands.report.not_run_experiments``); listed with their reason in all three files
    (``summary.json``: the ``not_run`` list)."""
    entries = []
    for exp, res in results:
        run_s = res.provenance.get("timings", {}).get("run_s")
        cpu_s = res.provenance.get("timings", {}).get("cpu_s")
        states = [c.state for c in res.checks]
        entries.append({
            "name": exp.name, "title": exp.title, "paper": exp.paper, "status": res.status,
            "passed": res.passed, "error": res.error,
            "checks_passed": states.count("pass"), "checks_inconclusive": states.count("inconclusive"),
            "checks_failed": states.count("fail"), "checks_total": len(res.checks),
            "failed_checks": [c.name for c in res.failed_checks],
            "inconclusive_checks": [c.name for c in res.inconclusive_checks], "time_s": run_s,
            "cpu_s": cpu_s, "device": res.provenance.get("device"), "precision": res.provenance.get("precision"),
            "precision_error": res.provenance.get("precision_error"), "report": f"{exp.name}/report.md",
            "html": f"{exp.name}/report.html", "results": f"{exp.name}/results.json"})
    # the run's device (one config for every experiment; null when they differ or none ran)
    devices = {res.provenance.get("device") for _, res in results}
    reasons = {res.provenance.get("device_reason") for _, res in results}
    env = environment()
    statuses = [e["status"] for e in entries]
    summary = jsonable({
        "schema_version": RESULTS_SCHEMA_VERSION, "profile": profile,
        "status": next((s for s in ("error", "fail", "inconclusive") if s in statuses), "pass"),
        "passed": all(s == "pass" for s in statuses), "n_experiments": len(entries),
        "n_passed": statuses.count("pass"), "n_inconclusive": statuses.count("inconclusive"),
        "n_failed": statuses.count("fail"), "n_errors": statuses.count("error"),
        "total_time_s": sum(e["time_s"] or 0.0 for e in entries),
        "total_cpu_s": sum(e["cpu_s"] or 0.0 for e in entries),
        "device": devices.pop() if len(devices) == 1 else None,
        "device_reason": reasons.pop() if len(reasons) == 1 else None,
        "experiments": entries, "not_run": [dict(e) for e in not_run],
        "versions": env["versions"], "git_commit": env["git_commit"],
    })
    head = ["experiment", "paper", "verdict", "checks passed", "time (s)", "title"]
    rows = [[e["name"], e["paper"], _STATE_CELL[e["status"]], f"{e['checks_passed']}/{e['checks_total']}",
             "—" if e["time_s"] is None else f"{e['time_s']:.1f}", e["title"]] for e in entries]
    verdict = f"{_STATE_CELL[summary['status']].upper()} — {summary_counts(summary)}" \
              + f" (profile {profile}, {summary['total_time_s']:.1f} s)"
    md = [f"# transformer_limits verification report ({profile})", "", f"**{verdict}**", ""]
    md += _md_table(head, [[f"[{r[0]}]({r[0]}/report.md)"] + r[1:] for r in rows])
    md += [f"\n{e['name']} ran in float32: {e['precision_error']['quantity']} within "
           f"{e['precision_error']['max_rel']:.2e} (relative) of float64" for e in entries if e["precision_error"]]
    md += ["", f"git commit `{env['git_commit'] or 'not in a git checkout'}`; versions "
           + ", ".join(f"{k} {v}" for k, v in env["versions"].items()), ""]
    failing = [e for e in entries if e["status"] == "fail"]
    if failing:
        md += ["## Failed checks", ""] + [f"- {e['name']}: {', '.join(e['failed_checks'])}" for e in failing] + [""]
    undecided = [e for e in entries if e["inconclusive_checks"]]
    if undecided:
        md += ["## Inconclusive checks (not contradicted, power below 0.8: the data could not have said no)", ""]
        md += [f"- {e['name']}: {', '.join(e['inconclusive_checks'])}" for e in undecided] + [""]
    crashed = [e for e in entries if e["status"] == "error"]
    if crashed:
        md += ["## Crashed experiments (ERROR, not a failed check)", ""] + [
            f"- {e['name']}: {_md_escape(e['error'])}" for e in crashed] + [""]
    skipped = summary["not_run"]
    if skipped:
        md += ["## Not run", ""] + _md_table(["experiment", "paper", "why not", "title"], [
            [e["name"], e["paper"], e["reason"], e["title"]] for e in skipped]) + [""]
    table = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for e, r in zip(entries, rows):
        cells = [f'<a href="{_e(e["html"])}">{_e(r[0])}</a>'] + [_e(c) for c in r[1:]]
        table.append(f'<tr class="{e["status"]}">'
                     + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    body = [f"<h1>transformer_limits verification report ({_e(profile)})</h1>",
            f"<p>{_verdict_badge(summary['status'], verdict)}</p>", "".join(table) + "</table>"]
    if skipped:
        body += ["<h2>Not run</h2>", _html_table(["experiment", "paper", "why not", "title"], [
            [e["name"], e["paper"], e["reason"], e["title"]] for e in skipped])]  # cells escaped there
    body += [
            f"<p class=\"small\">git commit <code>{_e(env['git_commit'] or 'not in a git checkout')}</code>; "
            + _e(", ".join(f"{k} {v}" for k, v in env["versions"].items())) + "</p>"]
    with staged_directory(out_dir) as stage:
        (stage / "summary.json").write_text(_dumps(summary), encoding="utf-8")
        (stage / "index.md").write_text("\n".join(md), encoding="utf-8")
        (stage / "index.html").write_text(_html_page(f"verification report ({profile})", body), encoding="utf-8")
    return summary
