"""One self-contained HTML page per diagnosis: every figure embedded as a base64 PNG, tables
inline, no scripts or styles from elsewhere, so it opens from disk in any browser.

Sections: the verdict per method (one line, verdict.py), the headline per method (Δpass@k with
its interval, crossover k*, area over log k, lost with its detection floor), the figures
`figures.write_diagnose_figures` drew, the attribution of Δpass@k at the largest k by regime and
transition cell, and the worst lost prompts with their problem text and, where the inputs were
samples, the base's correct answers beside the policy's.

`write_run_page` is a pipeline run's landing page (results/{run}/report.html, written by the
report): the same verdicts and headline, the regime pass@k figure inline, the worst lost prompts
of the diagnostic split (answers side by side, from the evaluations' samples), then every table
of the run (each with its files, and why where the config could not fill it) and links to every
figure and audit file, relative to the page, so the run's folder can be moved or shared whole.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from boundary.analysis.label_reliability import summary_lines as reliability_lines
from boundary.analysis.tables import count_cell
from boundary.analysis.verdict import outcomes
from boundary.core.artifacts import write_text
from boundary.readers.problems import question

FIGURES = [("passk_curves", "pass@k curves (seed mean, one-SD band; dashed: base pass@K)"),
           ("delta_curves", "Δpass@k at every k, with the crossover k*"),
           ("attribution", "Where Δpass@k comes from: regimes and transition cells"),
           ("paired_gain", "Seed-paired gain"),
           ("regime_passk", "pass@k per regime"),
           ("transitions", "Base → trained transitions"),
           ("p_base_hist", "Base success rate and regime thresholds"),
           ("strata_delta", "Δpass@k by p_base stratum")]
WORST = 12     # lost prompts listed
SHOWN = 3      # distinct sampled answers shown per side (most frequent first)
CLIP = 1200    # characters of problem or answer text shown

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1100px;color:#222;
     line-height:1.4;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0;font-size:.85em}
th,td{border:1px solid #ddd;padding:.25em .5em;text-align:right;vertical-align:top}
th{background:#f4f4f4}td.l,th.l{text-align:left}
figure{margin:1em 0}figure img{max-width:100%;height:auto}figcaption{font-size:.85em;color:#555}
pre{white-space:pre-wrap;background:#f8f8f8;padding:.5em;font-size:.8em;margin:.2em 0;max-height:20em;overflow:auto}
.ok{color:#009E73}.bad{color:#D55E00}.note{color:#555;font-size:.85em}
.sides{display:flex;gap:1em}.sides>div{flex:1;min-width:0}
ul.verdicts li{margin:.3em 0}
"""


def esc(x) -> str:
    return html.escape(str(x), quote=True)


def clip(text, limit: int = CLIP) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more characters]"


def pts(x, digits: int = 1, sign: bool = True) -> str:
    if x is None or not np.isfinite(x):
        return "n/a"
    x = 100 * x + 0.0  # exactly 0 reads "+0.0"; a tiny negative keeps its sign ("-0.0": it excludes 0)
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def interval(lo, hi, digits: int = 1) -> str:
    return f"[{pts(lo, digits)}, {pts(hi, digits)}]"


def kfmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return "none ≤ K" if math.isinf(x) else str(int(x))


def table(header, rows, left=1) -> str:
    head = "".join(f'<th class="l">{esc(h)}</th>' if i < left else f"<th>{esc(h)}</th>" for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="l">{c}</td>' if i < left else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def figure(png: Path, caption: str) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def _summary(diag, method, metric, regime="all", k=None):
    s = diag.summary
    r = s[(s["method"] == method) & (s["metric"] == metric) & (s["regime"] == regime)]
    r = r[r["k"].isna()] if k is None else r[r["k"] == k]
    return r.iloc[0] if len(r) else None


def headline(diag, view, methods) -> str:
    k_hi, k_lo = max(diag.ks), min(diag.ks)
    deltas = {o.method: o for o in outcomes(diag, view, methods)}
    rows = []
    for m in methods:
        a = diag.attribution
        area = a[(a["method"] == m) & a["seed"].isna() & (a["quantity"] == "area_log_k")
                 & (a["regime"] == "all") & (a["cell"] == "all")]
        x = diag.crossover[(diag.crossover["method"] == m) & diag.crossover["seed"].isna()]
        lost, sig = _summary(diag, m, "lost"), _summary(diag, m, "lost_significant")
        null, floor = _summary(diag, m, "lost_null"), _summary(diag, m, "lost_floor")
        K = int(x["K"].iloc[0]) if len(x) else k_hi
        r = x.iloc[0] if len(x) else None
        area_cell = "n/a"
        if len(area):
            ar = area.iloc[0]
            area_cell = (f"{pts(ar['value'], 2)} {interval(ar['boot_low'], ar['boot_high'], 2)}"
                         f"<br><span class='note'>÷ ln K: {pts(ar['value'] / math.log(K), 2) if K > 1 else 'n/a'}</span>")
        rows.append([esc(view.label(m)), str(int(x["n_seeds"].iloc[0])) if len(x) else "?",
                     *(_delta_cell(getattr(deltas.get(m), side, None)) for side in ("first", "last")),
                     f"{kfmt(r['kstar'])} [{kfmt(r['kstar_low'])}, {kfmt(r['kstar_high'])}]" if r is not None else "n/a",
                     area_cell,
                     count_cell(diag.metrics, m, "lost") if lost is not None else "n/a",
                     count_cell(diag.metrics, m, "lost_significant") if sig is not None else "n/a",
                     f"{null['mean'] * null['n_seeds']:.1f}" if null is not None else "n/a",
                     f"{floor['mean']:.3g}" if floor is not None else "n/a"])
    lvl = f"{100 * diag.level:g}%"
    return table(["Method", "Seeds", f"Δp@{k_lo} (pts) [{lvl}]", f"Δp@{k_hi} (pts) [{lvl}]", f"k* [{lvl}]",
                  f"Area over ln k (pts·ln k) [{lvl}]", "Lost: total (per seed)", "Lost, significant",
                  "Lost if unchanged (total expected)", "0/n floor on p"], rows)


def _delta_cell(d) -> str:
    """A Δ in points with its interval below it (verdict.Delta)."""
    if d is None or not np.isfinite(d.value):
        return "n/a"
    if not (np.isfinite(d.low) and np.isfinite(d.high)):
        return pts(d.value / 100)
    return f"{pts(d.value / 100)}<br><span class='note'>{interval(d.low / 100, d.high / 100)}</span>"


def verdicts(diag, view, methods) -> str:
    """One line per method: what the run shows (verdict.py)."""
    lines = [o.verdict() for o in outcomes(diag, view, methods)]
    return "<ul class='verdicts'>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>"


def attribution_table(diag, view, methods) -> str:
    a, k_hi = diag.attribution, max(diag.ks)
    sub = a[a["seed"].isna() & (a["quantity"] == "delta_passk") & (a["k"] == k_hi)]
    regimes = [r for r in dict.fromkeys(sub["regime"]) if r != "all"] + ["all"]
    cells = ["kept", "lost", "gained", "never", "all"]
    out = []
    for m in methods:
        s = sub[sub["method"] == m]
        rows = []
        for reg in regimes:
            row = [esc(reg)]
            for cell in cells:
                v = s[(s["regime"] == reg) & (s["cell"] == cell)]
                row.append("n/a" if v.empty else f"{pts(v['value'].iloc[0])}<br><span class='note'>"
                                                 f"{interval(v['boot_low'].iloc[0], v['boot_high'].iloc[0])}</span>")
            rows.append(row)
        out.append(f"<h3>{esc(view.label(m))}</h3>" + table(["Regime \\ cell"] + cells, rows))
    return "".join(out)


def shown(completions: pd.Series) -> list[str]:
    """The most frequent distinct completions, with how often each was sampled."""
    counts = completions.astype(str).value_counts()
    return [f"<pre>{esc(clip(t))}</pre><p class='note'>× {int(c)}</p>" if c > 1 else f"<pre>{esc(clip(t))}</pre>"
            for t, c in counts.head(SHOWN).items()]


def _lost_ranked(diag):
    """(every lost row, the lost prompts ranked by how many runs lost them significantly, then
    by how many lost them, then by the smallest Fisher p)."""
    p = diag.prompts
    lost = p[(p["method"] != "base") & p["lost_p"].notna()]
    rank = lost.groupby("prompt_id").agg(runs=("lost_p", "size"), significant=("lost_significant", "sum"),
                                         best_p=("lost_p", "min")).sort_values(["significant", "runs", "best_p"],
                                                                               ascending=[False, False, True])
    return lost, rank


def worst_lost_keys(diag) -> dict:
    """{(method, seed): prompt ids} whose samples `worst_lost` shows: the base's first draw for
    every listed prompt, and for each the run with the smallest Fisher p."""
    lost, rank = _lost_ranked(diag)
    keys: dict = {}
    for pid in rank.index[:WORST]:
        keys.setdefault(("base", 0), set()).add(pid)
        m, s = lost[lost["prompt_id"] == pid].sort_values("lost_p")[["method", "seed"]].iloc[0]
        keys.setdefault((m, int(s)), set()).add(pid)
    return keys


def worst_lost(diag, view, samples: dict, problems: dict) -> str:
    """Lost prompts ranked by how many runs lost them significantly, then by the Fisher p; the
    base's correct answers beside the policy's where `samples` has them."""
    p = diag.prompts
    lost, rank = _lost_ranked(diag)
    if lost.empty:
        return "<p>No prompt was lost (solved by the base, unsolved after training) in any run.</p>"
    base = p[p["method"] == "base"].set_index("prompt_id")
    p_base = diag.regimes.set_index("prompt_id")["p_base"] if diag.regimes is not None else pd.Series(dtype=float)
    parts = []
    for pid, r in rank.head(WORST).iterrows():
        b = base.loc[pid]
        runs = p[(p["prompt_id"] == pid) & (p["method"] != "base")]
        per_run = ", ".join(f"{esc(view.label(m))} s{s}: {c}/{n}" for m, s, c, n in
                            runs[["method", "seed", "c", "n"]].itertuples(index=False))
        head = (f"<b>{esc(pid)}</b> · {esc(b['regime'])} · p_base {p_base.get(pid, float('nan')):.3g} · "
                f"base {int(b['c'])}/{int(b['n'])} · lost in {int(r['runs'])} run(s), "
                f"{int(r['significant'])} significant (best p = {r['best_p']:.2g})")
        body = [f"<p class='note'>{per_run}</p>"]
        if pid in problems:
            body.append(f"<p>Problem:</p><pre>{esc(clip(question(problems[pid])))}</pre>")
        sides = []
        base_s = samples.get(("base", 0))
        if base_s is not None:
            pos = base_s[(base_s["prompt_id"] == pid) & base_s["correct"].astype(bool)]
            sides.append([f"<p class='ok'>Base, verified correct ({len(pos)} of "
                          f"{int((base_s['prompt_id'] == pid).sum())}):</p>"] + shown(pos["completion"]))
        lost_runs = lost[lost["prompt_id"] == pid].sort_values("lost_p")
        for m, s in lost_runs[["method", "seed"]].head(1).itertuples(index=False):
            run_s = samples.get((m, int(s)))
            if run_s is not None:
                mine = run_s[run_s["prompt_id"] == pid]
                sides.append([f"<p class='bad'>{esc(view.label(m))} seed {s}, none correct ({len(mine)} samples):</p>"
                              ] + shown(mine["completion"]))
        if sides:
            body.append("<div class='sides'>" + "".join(f"<div>{''.join(side)}</div>" for side in sides) + "</div>")
        parts.append(f"<details{' open' if len(parts) < 3 else ''}><summary>{head}</summary>{''.join(body)}</details>")
    note = (f"<p class='note'>Lost = solved by the base (c &gt; 0) and unsolved after training (0 of n). "
            f"Significant: one-sided Fisher exact test against the base's counts at level {diag.level:g}. "
            f"{len(rank)} prompt(s) lost in some run; the {min(WORST, len(rank))} with the strongest evidence:</p>")
    return note + "".join(parts)


def _intro(diag, methods) -> str:
    n_prompts = int(diag.prompts[diag.prompts["method"] == "base"].shape[0])
    runs = diag.prompts[diag.prompts["method"] != "base"][["method", "seed"]].drop_duplicates()
    regimes = (diag.regimes["regime"].value_counts().to_dict() if diag.regimes is not None else {})
    reliability = (" ".join(esc(line) + "." for line in reliability_lines(diag.regimes))
                   if diag.regimes is not None else "")
    return (f"<p>{n_prompts} prompts; base and {len(runs)} trained run(s) of {len(methods)} method(s); regimes: "
            + (", ".join(f"{esc(k)} {v}" for k, v in regimes.items()) or "none") +
            f". Intervals: {100 * diag.level:g}% paired prompt bootstrap, nested over seeds.</p>"
            + (f"<p class='note'>{reliability}</p>" if reliability else ""))


HEADLINE_NOTE = ("<p class='note'>k*: smallest k where trained pass@k falls below base. Area: ∫ Δpass@k d(ln k) "
                 "from 1 to K; ÷ ln K is the log-k average. Lost if unchanged: the lost count that n fresh samples "
                 "of the base itself would show (Beta-Binomial predictive). 0/n floor: a prompt with 0 of n correct "
                 "is consistent with any p up to this.</p>")


def write_page(diag, view, figures_dir: Path, path: Path, samples: dict | None = None,
               problems: dict | None = None) -> Path:
    """Write the page; `samples` maps (method, seed) to sample rows, `problems` prompt_id to text."""
    samples, problems = samples or {}, problems or {}
    methods = [m for m in view.main if m in set(diag.summary["method"])]
    figs = "".join(figure(Path(figures_dir) / f"{name}.png", caption) for name, caption in FIGURES
                   if (Path(figures_dir) / f"{name}.png").exists())
    sections = [
        "<h1>pass@k diagnosis</h1>" + _intro(diag, methods) + verdicts(diag, view, methods),
        "<h2>Headline</h2>" + (headline(diag, view, methods) if diag.attribution is not None else "<p>n/a</p>"),
        HEADLINE_NOTE,
        "<h2>Figures</h2>" + figs,
        f"<h2>Attribution of Δpass@{max(diag.ks)} (points, seed mean, interval below)</h2>"
        + (attribution_table(diag, view, methods) if diag.attribution is not None else "<p>n/a</p>"),
        "<h2>Worst lost prompts</h2>" + worst_lost(diag, view, samples, problems),
    ]
    write_text(_document("pass@k diagnosis", sections, figs.count("<figure>")), path)
    return Path(path)


def _document(title: str, sections: list[str], n_figures: int) -> str:
    # Counts decoded figures once loaded, so a check (or a reader) can see they all rendered.
    script = ("<script>addEventListener('load',function(){var n=0;for(var i of document.images)"
              "{if(i.complete&&i.naturalWidth>0)n++}document.body.setAttribute('data-figures-rendered',n)})</script>")
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<style>{STYLE}</style></head><body data-figures=\"{n_figures}\">"
            + "".join(sections) + script + "</body></html>\n")


# ----------------------------------------------------------------------------- a run's landing page

def link(path: Path, page_dir: Path, text: str) -> str:
    return f'<a href="{esc(Path(path).relative_to(page_dir).as_posix())}">{esc(text)}</a>'


def html_table(t) -> str:
    """A report table (tables.Table) as HTML: its cells as the Markdown file shows them."""
    cell = lambda c: esc(c.md() if hasattr(c, "md") else c)
    return table(t.columns, [[cell(c) for c in row] for row in t.rows])


def _files(page_dir: Path, stem: Path, exts) -> str:
    found = [link(stem.with_suffix(f".{ext}"), page_dir, ext) for ext in exts
             if stem.with_suffix(f".{ext}").exists()]
    return " · ".join(found)


def write_run_page(diag, view, run_tables: list, figures: list[tuple[str, str]], out: Path,
                   run: str, headline_table=None, samples: dict | None = None) -> Path:
    """results/{run}/report.html: the landing page of a pipeline run, written into `out` (the
    folder holding tables/, figures/, diagnostics/). `run_tables` are the report's tables (as
    written under tables/); `figures` (name, caption) those written under figures/, the first
    of which (the regime pass@k figure) is shown inline; `headline_table`, shown under the
    headline, is the run's seed-level intervals; `samples` ({(method, seed): rows}) the answers
    shown for the worst lost prompts (`worst_lost_keys`)."""
    out = Path(out)
    methods = [m for m in view.main if m in set(diag.summary["method"])]
    fdir, tdir = out / "figures", out / "tables"
    lead = [(n, c) for n, c in figures if (fdir / f"{n}.png").exists()][:1]
    sections = [f"<h1>Run {esc(run)}: pass@k report</h1>" + _intro(diag, methods)
                + verdicts(diag, view, methods)
                + "<p class='note'>Regimes, verdicts and the headline are on the diagnostic split; every table below "
                  "links its Markdown, CSV and LaTeX files.</p>",
                "<h2>Headline (diagnostic split)</h2>"
                + (headline(diag, view, methods) if diag.attribution is not None else "<p>n/a</p>"), HEADLINE_NOTE]
    if headline_table is not None:
        sections.append(f"<h3>{esc(headline_table.caption)}</h3>" + _table_body(headline_table))
    sections.append("<h2>pass@k per regime</h2>"
                    + "".join(figure(fdir / f"{n}.png", c) for n, c in lead))
    sections.append("<h2>Worst lost prompts (diagnostic split)</h2>"
                    + worst_lost(diag, view, samples or {}, diag.problems or {}))
    items = []
    for t in run_tables:
        files = _files(out, tdir / t.name, ("md", "csv", "tex"))
        why = f" <span class='bad'>{esc(t.rows[0][0])}</span>" if t.columns == ["Note"] else ""  # tables.unfilled
        items.append(f"<details><summary><b>{esc(t.caption)}</b>{why} <span class='note'>{esc(t.name)}: {files}"
                     f"</span></summary>{_table_body(t)}</details>")
    sections.append("<h2>Tables</h2>" + "".join(items))
    rows = [[esc(c), _files(out, fdir / n, ("png", "pdf"))] for n, c in figures
            if (fdir / f"{n}.png").exists() or (fdir / f"{n}.pdf").exists()]
    sections.append("<h2>Figures</h2>" + table(["Figure", "Files"], rows))
    audit = [link(p, out, p.relative_to(out).as_posix()) for p in sorted(out.glob("diagnostics/*/*.csv"))]
    data = [link(p, out, p.relative_to(out).as_posix())
            for p in [out / "eval_counts.parquet", *sorted(out.glob("release/*"))] if p.exists()]
    sections.append("<h2>Data and audit files</h2><p>" + " · ".join(data) + "</p><p class='note'>"
                    + " · ".join(audit) + "</p>")
    path = out / "report.html"
    write_text(_document(f"Run {run}: pass@k report", sections, len(lead)), path)
    return path


def _table_body(t) -> str:
    """A table's cells and notes; a table the run could not fill is its one line of why."""
    notes = "".join(f"<p class='note'>{esc(n)}</p>" for n in t.notes)
    return (html_table(t) if t.rows else "") + notes
