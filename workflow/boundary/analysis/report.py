"""The report: every table and figure of the paper from the pipeline's per-prompt artifacts.

It is `diagnose` run over the pipeline's own files -- the same `analyse`, tables and figures --
plus what only the pipeline has: several benchmarks, the controls and gate-ablation tables
(which need masks and the run settings), and training logs.

CLI:
    boundary report --results results/{run} --settings SETTINGS [--out results/{run}]

SETTINGS is a JSON file or string (see docs/reference/report_settings.md for every key):
    baseline, method      the GRPO baseline and PBA method names      ("grpo", "pba")
    main                  methods of the seed-resolved tables         ([baseline, method])
    labels                display name per method                     ({"pba": "GRPO+PBA"})
    diagnostic            eval folder of the regime-study split       ("diagnostic")
    benchmarks            {eval folder: display name}, in table order
    headline              benchmark of the mechanism/headline tables  (first benchmark)
    ks                    pass@k values                               ([1, 4, 16, 64, 256])
    controls              [{method, label, setting}]   rows of the controls table
    ablations             [{method, mask, G0, tau, kind}] rows of the gate-ablation table (kind: gate|soft)
    group_size, gate_G0   G and G0 of the gate-resolution table       (8, 8)
    ranked                methods of the methods-ranking table/figure ([]: every method evaluated)
    strata_bins           p_base strata edges
    bootstrap             {resamples, seed}                            (10000, 0)
    level                 interval level                               (0.95)

Reads (under --results): regimes/regimes.parquet, splits/{diagnostic}.parquet,
eval/*/*/seed*/counts.parquet, masks/*.parquet (optional), train/*/seed*/log.parquet (optional),
eval/{diagnostic}/*/seed*/samples.parquet (optional: the worst lost prompts' answers on the page).
Writes (under --out): report.html (the run's landing page: page.write_run_page); eval_counts.parquet (every counts row with benchmark, method, seed,
and p_base/regime on the diagnostic split); release/{diagnostic}_split.jsonl (the split with
its regime labels, as in the paper's release manifest); tables/{name}.{tex,md,csv} for names in
`table_names(settings)`; figures/{name}.{pdf,png} for `figure_names(settings)`;
diagnostics/{split}/{regimes,passk,metrics,summary,transitions,bootstrap,pairs,strata,skills,
sensitivity,masks,attribution,crossover,curves,prompts}.csv (the audit tables; pairs, strata,
skills, sensitivity and masks where they apply).
All of it is written to a temp folder first and moved into place at the end.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from boundary.analysis import page, tables, verdict
from boundary.analysis.diagnose import analyse, check_regimes, load_mask, mask_metrics
from boundary.analysis.regimes import strata_order
from boundary.analysis.report_settings import figure_names
from boundary.core.artifacts import read_table, write_table
from boundary.core.errors import BoundaryError, warn
from boundary.core.names import BASE
from boundary.readers.counts import load_counts
from boundary.readers.problems import snippet

SEED_DIR = re.compile(r"seed(-?\d+)$")
ONE_BASE_DRAW = ("one base draw: the Δ intervals over seeds leave out the base's own sampling noise "
                 "(evaluate.base_seeds: 2 or more evaluates the base again)")


def expected(paths, results: Path, pattern: str) -> list[Path]:
    """The files the report summarises: `paths` as given (the pipeline lists its inputs, so a
    stale file of a method no longer configured is never mixed in), each of which must exist,
    or else every file under `results` that matches `pattern`."""
    if paths is None:
        return sorted(results.glob(pattern))
    for path in map(Path, paths):
        if not path.is_file():
            raise BoundaryError(f"{path}: file not found (the report summarises it)")
    return sorted(map(Path, paths))


def find_counts(results: Path, paths=None) -> dict:
    """{split: {(method, seed): path}} from eval/{split}/{method}/seed{seed}/counts.parquet."""
    found = {}
    for path in expected(paths, results, "eval/*/*/seed*/counts.parquet"):
        m = SEED_DIR.match(path.parent.name)
        if m:
            split, method = path.parts[-4], path.parts[-3]
            found.setdefault(split, {})[(method, int(m.group(1)))] = path
    return found


def load_split(split: str, paths: dict):
    """(base draws, runs, names): every base evaluation (seed0, seed1, ...: independent draws,
    pooled by `analyse`) and every trained run of the split."""
    if (BASE, 0) not in paths:
        raise BoundaryError(f"eval/{split}/{BASE}/seed0/counts.parquet: file not found (the base evaluation)")
    draws = [load_counts(paths[key]) for key in sorted(k for k in paths if k[0] == BASE)]
    runs = {key: load_counts(p) for key, p in paths.items() if key[0] != BASE}
    names = {key: str(p) for key, p in paths.items()}
    return draws, runs, names


def split_labels(results: Path, split: str, diag_split: str, column: str):
    """{prompt_id: label} from the split file's `cluster` or `skill` column (the data stage
    writes them from a dataset's cluster_field and skill_field); None where the split has none."""
    path = results / "splits" / (f"{split}.parquet" if split == diag_split else f"bench_{split}.parquet")
    if not path.is_file():
        return None
    table = pd.read_parquet(path)
    if column not in table:
        return None
    return pd.Series(table[column].astype(str).to_numpy(), index=table["prompt_id"].astype(str))


def merged_counts(found: dict) -> pd.DataFrame:
    """eval_counts.parquet: every per-prompt counts row with its benchmark, method and seed."""
    frames = []
    for split, paths in found.items():
        for (method, seed), path in paths.items():
            frames.append(pd.read_parquet(path).assign(benchmark=split, method=method, seed=seed))
    if not frames:
        return pd.DataFrame(columns=["benchmark", "method", "seed", "prompt_id", "n", "c"])
    df = pd.concat(frames, ignore_index=True)
    first = ["benchmark", "method", "seed", "prompt_id", "n", "c"]
    return df[first + [c for c in df.columns if c not in first]]


def split_problems(results: Path, split: str) -> dict:
    """prompt_id -> problem text of splits/{split}.parquet ({} where there is no such split)."""
    path = results / "splits" / f"{split}.parquet"
    if not path.is_file():
        return {}
    table = read_table(path, ["prompt_id"])
    column = next((c for c in ("problem", "prompt") if c in table.columns), None)
    return dict(zip(table["prompt_id"].astype(str), table[column])) if column else {}


def lost_samples(diag, counts: dict, paths=None) -> dict:
    """{(method, seed): sample rows} of the runs whose answers the page shows for the worst lost
    prompts (page.worst_lost_keys), only those prompts' rows: from `paths` (the samples files
    given), else samples.parquet beside each counts file; a run without one shows no answers."""
    import pyarrow.parquet as pq

    given = {Path(p).parent: Path(p) for p in paths} if paths is not None else None
    out = {}
    for key, ids in page.worst_lost_keys(diag).items():
        folder = Path(counts[key]).parent if key in counts else None
        path = (given or {}).get(folder) if given is not None else (folder / "samples.parquet" if folder else None)
        if path is None or not path.is_file():
            continue
        table = pq.read_table(path, columns=["prompt_id", "completion", "correct"],
                              filters=[("prompt_id", "in", sorted(ids))])
        out[key] = table.to_pandas().assign(prompt_id=lambda f: f["prompt_id"].astype(str))
    return out


def figure_captions(settings: dict) -> list[tuple[str, str]]:
    """(name, caption) of every figure the report draws; the regime pass@k figure first (the
    landing page shows it)."""
    fixed = {"regime_passk": "pass@k per regime, base and trained (diagnostic split)",
             "transitions": "Base → trained solved/unsolved transitions per regime (diagnostic split)",
             "p_base_hist": "Base success rate p_base and the regime thresholds",
             "strata_delta": "Δpass@k by p_base stratum (diagnostic split)",
             "training": "Training curves: reward, entropy, KL, protected fraction (seed mean)",
             "methods_ranking": "Methods ranked by benchmark pass@1 and Boundary Δpass@K"}
    for b, label in settings["benchmarks"].items():
        fixed[f"passk_{b}"] = f"pass@k curves on {label}"
        fixed[f"paired_gain_{b}"] = f"Seed-paired gain on {label}"
    names = figure_names(settings)
    return [(n, fixed[n]) for n in ["regime_passk"] + [n for n in names if n != "regime_passk"]]


def build(results: Path, settings: dict, out: Path, inputs: dict | None = None, *,
          tables_only: bool = False) -> list[str]:
    """Write the whole report into `out` (a fresh folder). `inputs` ({counts, masks, logs,
    samples}: lists of paths) names exactly the files to summarise; otherwise every one under
    results. Returns the diagnostic split's results table and verdict lines (for the log).
    tables_only stops after the tables (no figures, no landing page): drawing is about half the
    time, and a check of the tables against a published copy needs none of it."""
    inputs = inputs or {}
    view = tables.View.from_settings(settings)
    found = find_counts(results, inputs.get("counts"))
    diag_split = settings["diagnostic"]
    if diag_split not in found:
        raise BoundaryError(f"{results}/eval/{diag_split}: no counts files (the regime-study evaluation)")
    regimes = read_table(results / "regimes" / "regimes.parquet", ["prompt_id", "p_base", "regime"])
    masks = {p.stem: load_mask(p) for p in expected(inputs.get("masks"), results, "masks/*.parquet")}
    mask_table = mask_metrics(masks) if masks else None
    boot, level, ks, bins = settings["bootstrap"], float(settings["level"]), settings["ks"], settings["strata_bins"]
    pairs = [(view.method, view.baseline)]

    def run(split, regimes_or_none):
        base, runs, names = load_split(split, found[split])
        problems = split_problems(results, split)
        if regimes_or_none is not None:
            check_regimes(base[0], regimes_or_none, str(results / "regimes" / "regimes.parquet"), problems)
        have = {m for m, _ in runs}
        pr = [p for p in pairs if set(p) <= have]
        return analyse(base, runs, regimes_or_none, ks, int(boot["resamples"]), int(boot["seed"]),
                       pr, bins, masks if split == diag_split else None, names, level, problems=problems,
                       clusters=split_labels(results, split, diag_split, "cluster"),
                       skills=split_labels(results, split, diag_split, "skill"))

    diag = run(diag_split, regimes.assign(prompt_id=regimes["prompt_id"].astype(str)))
    if diag.base_draws == 1 and (diag.frame["method"] != BASE).any():
        warn(ONE_BASE_DRAW)
    benches = {b: run(b, None) for b in settings["benchmarks"] if b in found}
    for b in settings["benchmarks"]:
        if b not in found:
            warn(f"{results}/eval/{b}: no counts files; its tables and figures say 'not run'")
    for split in found:
        if split != diag_split and split not in settings["benchmarks"]:
            warn(f"{results}/eval/{split}: not in settings.benchmarks; left out of the tables")

    # Audit tables, per split.
    for split, d in [(diag_split, diag), *benches.items()]:
        for name, table in d.csv_tables().items():
            write_table(table, out / "diagnostics" / split / f"{name}.csv")
    counts = merged_counts(found)
    labels = regimes[["prompt_id", "p_base", "regime"]].assign(prompt_id=regimes["prompt_id"].astype(str),
                                                              benchmark=diag_split)
    counts = counts.assign(prompt_id=counts["prompt_id"].astype(str)).merge(labels, on=["benchmark", "prompt_id"],
                                                                           how="left")
    text = {(b, p): snippet(t) for b, d in [(diag_split, diag), *benches.items()] for p, t in (d.problems or {}).items()}
    counts["problem"] = [text.get(key, "") for key in zip(counts["benchmark"], counts["prompt_id"])]
    write_table(counts, out / "eval_counts.parquet")
    split = read_table(results / "splits" / f"{diag_split}.parquet", ["prompt_id"])
    split = split.assign(prompt_id=split["prompt_id"].astype(str)).merge(
        labels.drop(columns="benchmark"), on="prompt_id", how="left")
    write_table(split, out / "release" / f"{diag_split}_split.jsonl")

    # Tables.
    tdir = out / "tables"
    headline = benches.get(settings["headline"]) if settings["headline"] else None
    headline_label = view.bench_label(settings["headline"]) if headline is not None else diag_split
    if headline is None:
        warn("headline benchmark not evaluated: the mechanism and headline tables use the diagnostic split")
        headline = diag
    curves = (tables.benchmark_curves(benches, view) if benches else
              tables.unfilled("benchmark_curves", "Full benchmark pass@k curves", "No benchmark was evaluated."))
    for b, label in settings["benchmarks"].items():
        if b not in benches and benches:
            curves.rows.append([label, tables.NOT_RUN] + [""] * (len(curves.columns) - 2))
            curves.notes.append(f"{label}: not run.")
    ts = [curves,
          tables.mechanism_summary(headline, diag, view), tables.headline_intervals(headline, diag, view),
          tables.controls(diag, view), tables.gate_ablation(diag, mask_table, view), tables.gate_resolution(view),
          tables.masks_table(mask_table), tables.methods_ranking(headline, diag, view, headline_label)]
    for b, label in settings["benchmarks"].items():
        ts.append(tables.seed_curves(b, benches[b], view) if b in benches else
                  tables.unfilled(f"seeds_{b}", f"Seed-resolved {label} pass@k results", f"{label}: not run."))
    ts += tables.diagnostic_tables(diag, view, strata_order(bins))
    for t in ts:
        t.write(tdir)
    if tables_only:
        return []

    # Figures.
    from boundary.analysis import figures  # matplotlib only when drawing: the Snakefile imports the names above
    fdir = out / "figures"
    for b, label in settings["benchmarks"].items():
        d = benches.get(b)
        if d is None:
            figures.placeholder(fdir, f"passk_{b}", f"{label}: not run")
            figures.placeholder(fdir, f"paired_gain_{b}", f"{label}: not run")
            continue
        figures.passk_curves(d, view, f"{label} pass@k", fdir, f"passk_{b}")
        figures.paired_gain(d, view, fdir, f"paired_gain_{b}")
    figures.regime_passk(diag, view, fdir)
    figures.transition_heatmaps(diag, view, fdir)
    figures.p_base_histogram(diag, fdir)
    figures.strata_delta(diag, view, strata_order(bins), fdir)
    base_p1 = tables.stat(headline.summary, tables.BASE, "passk", k=1)
    figures.methods_ranking(tables.ranked_methods(headline, diag, view),
                            base_p1.mean if isinstance(base_p1, tables.Stat) else float("nan"), view,
                            headline_label, max(diag.ks), fdir)
    logs = []
    for path in expected(inputs.get("logs"), results, "train/*/seed*/log.parquet"):
        m = SEED_DIR.match(path.parent.name)
        if m:
            logs.append(pd.read_parquet(path).assign(method=path.parts[-3], seed=int(m.group(1))))
    logs_df = pd.concat(logs, ignore_index=True) if logs else pd.DataFrame(columns=["method", "seed", "step"])
    figures.training_curves(logs_df[logs_df["method"].isin(view.main)] if logs else logs_df, view, fdir)

    # The landing page: headline, regime pass@k, every table and figure above.
    headline_table = next(t for t in ts if t.name == "headline_intervals")
    samples = lost_samples(diag, found[diag_split], inputs.get("samples"))
    page.write_run_page(diag, view, ts, figure_captions(settings), out, results.resolve().name, headline_table,
                        samples)
    rows = verdict.outcomes(diag, view)
    return [verdict.results_table(rows), *(o.verdict() for o in rows)]
