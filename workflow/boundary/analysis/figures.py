"""The paper's figures (matplotlib, Agg): PDF for the paper, PNG for the report.

Colours follow the paper: base blue, GRPO red-orange, PBA green; other methods cycle. Every
figure is drawn from `Diagnosis` summaries, so it shows exactly what the tables print.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from boundary.analysis.regimes import REGIMES  # noqa: E402
from boundary.core.artifacts import atomic_path  # noqa: E402
from boundary.core.names import BASE  # noqa: E402

BASE_BLUE, RL_RED, PBA_GREEN, GRAY = "#0072B2", "#D55E00", "#009E73", "#737373"
OTHERS = ["#756BB1", "#BC8000", "#CC79A7", "#56B4E9", "#E69F00", "#000000", "#999999"]
REGIME_COLOURS = {"OutOfReach": "#bdbdbd", "Boundary": "#756BB1", "Reachable": "#56B4E9", "SolvedEasy": "#009E73"}

plt.rcParams.update({"axes.formatter.use_mathtext": False, "font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 7,
                     "axes.spines.top": False, "axes.spines.right": False})


def colour(method: str, view) -> str:
    if method == BASE:
        return BASE_BLUE
    if method == view.baseline:
        return RL_RED
    if method == view.method:
        return PBA_GREEN
    others = [m for m in view.main if m not in (view.baseline, view.method)]
    return OTHERS[others.index(method) % len(OTHERS)] if method in others else GRAY


def save(fig, folder: Path, name: str) -> list[Path]:
    """Write NAME.pdf and NAME.png atomically."""
    paths = []
    # One tight bounding box for both formats: "tight" would lay the figure out again per file.
    bbox = fig.get_tightbbox(fig.canvas.get_renderer()).padded(0.1)
    for ext in ("pdf", "png"):
        path = Path(folder) / f"{name}.{ext}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, dpi=160, bbox_inches=bbox)
        paths.append(path)
    plt.close(fig)
    return paths


def _curve(summary, method, regime="all"):
    s = summary[(summary["method"] == method) & (summary["metric"] == "passk") & (summary["regime"] == regime)]
    s = s.sort_values("k")
    return s["k"].to_numpy(float), 100 * s["mean"].to_numpy(float), 100 * s["sd"].to_numpy(float)


def _not_run(ax, text="not run"):
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color=GRAY)


def _style(m, view) -> dict:
    """A method's pass@k curve: its colour, and a circle for the base, squares for the rest."""
    return {"marker": "o" if m == BASE else "s", "ms": 3, "lw": 1.3, "color": colour(m, view), "label": view.label(m)}


def _passk_axes(ax, diag, view, regime="all", legend=True, base_line=True):
    ks = diag.ks
    drawn = 0
    for m in [BASE] + view.main:
        k, mean, sd = _curve(diag.summary, m, regime)
        if len(k) == 0:
            continue
        c = colour(m, view)
        ax.plot(k, mean, **_style(m, view))
        if m != BASE and np.isfinite(sd).any():
            ax.fill_between(k, mean - np.nan_to_num(sd), mean + np.nan_to_num(sd), color=c, alpha=0.15, lw=0)
        drawn += 1
    if base_line:
        k, mean, _ = _curve(diag.summary, BASE, regime)
        if len(k):
            ax.axhline(mean[-1], color=GRAY, ls="--", lw=0.7)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_ylim(0, 100)
    ax.set_xlabel("k samples")
    ax.grid(True, color="0.9", lw=0.5)
    if legend and drawn:
        ax.legend(loc="lower right", frameon=False)
    if not drawn:
        _not_run(ax)


def passk_curves(diag, view, title: str, folder: Path, name: str) -> list[Path]:
    """Mean pass@k over seeds, one-SD bands, dashed base pass@K (fig:passk_curves, left), under
    `title`."""
    fig, ax = plt.subplots(figsize=(4.2, 2.8))
    _passk_axes(ax, diag, view)
    ax.set_ylabel("pass@k (%)")
    ax.set_title(title)
    missing = [view.label(m) for m in view.main if m not in set(diag.summary["method"])]
    if missing:
        ax.text(0.02, 0.97, "not run: " + ", ".join(missing), transform=ax.transAxes, va="top", color=GRAY)
    return save(fig, folder, name)


def paired_gain(diag, view, folder: Path, name: str) -> list[Path]:
    """Seed-paired PBA - GRPO gains at p@1 and p@K with seed-SD bars (fig:passk_curves, right)."""
    fig, ax = plt.subplots(figsize=(2.2, 2.8))
    ks = [1, max(diag.ks)]
    p = diag.pairs
    rows = [] if p is None else [p[(p["a"] == view.method) & (p["b"] == view.baseline) & (p["metric"] == "passk")
                                   & (p["regime"] == "all") & (p["k"] == k)] for k in ks]
    if not rows or any(r.empty for r in rows):
        _not_run(ax, f"{view.label(view.method)} or {view.label(view.baseline)}\nnot run")
    else:
        x = np.arange(len(ks))
        mean = np.array([100 * r["mean"].iloc[0] for r in rows])
        sd = np.array([100 * r["sd"].iloc[0] for r in rows])
        ax.vlines(x, 0, mean, color=PBA_GREEN, alpha=0.45, lw=2)
        ax.errorbar(x, mean, yerr=np.nan_to_num(sd), fmt="o", color=PBA_GREEN, ecolor="0.3", capsize=3, ms=5)
        for xi, m in zip(x, mean):
            ax.annotate(f"{m:+.1f}", (xi, m), textcoords="offset points", xytext=(0, 6), ha="center")
        ax.axhline(0, color=GRAY, lw=0.6)
        lo, hi = min(0, (mean - np.nan_to_num(sd)).min()), max(0, (mean + np.nan_to_num(sd)).max())
        ax.set_ylim(lo - 0.25 * (hi - lo + 1e-9), hi + 0.3 * (hi - lo + 1e-9))
    ax.set_xticks(range(len(ks)), [f"pass@{k}" for k in ks])
    ax.set_xlim(-0.6, len(ks) - 0.4)
    ax.set_ylabel(f"{view.label(view.method)} − {view.label(view.baseline)} (pts)")
    ax.set_title("Seed-paired gain ± seed SD")  # SD, as the paper draws it: not an interval
    return save(fig, folder, name)


def _legend_below(fig, ax, height: float) -> None:
    """One legend for every panel (`ax`'s curves name the methods), in a strip of `height`
    below them; no strip when nothing is labelled."""
    handles, labels = ax.get_legend_handles_labels()
    fig.tight_layout(rect=(0, height if labels else 0, 1, 1))
    if labels:
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)


def _method_legend(fig, diag, view, height: float) -> None:
    """The methods' legend below the panels, from every method the summary holds (not from one
    panel's curves: a first panel without prompts had dropped it)."""
    present = set(diag.summary["method"])
    handles = [plt.Line2D([], [], **_style(m, view)) for m in [BASE] + view.main if m in present]
    fig.tight_layout(rect=(0, height if handles else 0, 1, 1))
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False)


def regime_passk(diag, view, folder: Path, name: str = "regime_passk") -> list[Path]:
    """pass@k curves per regime, base vs trained methods; a regime without prompts keeps its
    panel, which says so; the legend names every method whichever panels are empty."""
    regimes = list(REGIMES) if diag.regimes is not None else []
    fig, axes = plt.subplots(1, max(len(regimes), 1), figsize=(2.3 * max(len(regimes), 1), 2.4), sharey=True)
    axes = np.atleast_1d(axes)
    for _i, (ax, r) in enumerate(zip(axes, regimes)):
        n = diag.regimes["regime"].eq(r).sum()
        if n:
            _passk_axes(ax, diag, view, r, legend=False)
        else:
            ax.set_xscale("log", base=2)
            ax.set_xticks(diag.ks, [str(k) for k in diag.ks])
            ax.set_xlabel("k samples")
            _not_run(ax, f"no {r} prompts")
        ax.set_title(f"{r} (n={n})")
    axes[0].set_ylabel("pass@k (%)")
    if not regimes:
        _not_run(axes[0], "no regime labels")
    _method_legend(fig, diag, view, 0.08)
    return save(fig, folder, name)


def transition_heatmaps(diag, view, folder: Path, name: str = "transitions") -> list[Path]:
    """Seed-mean base/trained solved matrices, one 2x2 panel per method and regime, on one
    colour scale (a colour bar beside them): a cell's colour compares across panels."""
    t = diag.transitions
    methods = [m for m in view.main if m in set(t["method"])] or ["(none)"]
    regimes = ["all"] + [r for r in REGIMES if r in set(t["regime"])]
    grids = {}
    for m in methods:
        for r in regimes:
            sub = t[(t["method"] == m) & (t["regime"] == r)]
            grid = np.zeros((2, 2))
            for a, bs in enumerate((True, False)):
                for b, ts in enumerate((True, False)):
                    grid[a, b] = sub[(sub["base_solved"] == bs) & (sub["trained_solved"] == ts)]["count"].mean()
            grids[m, r] = np.nan_to_num(grid)
    top = max(max(g.max() for g in grids.values()), 1)
    fig, axes = plt.subplots(len(methods), len(regimes), figsize=(1.7 * len(regimes) + 0.6, 1.7 * len(methods) + 0.3),
                             squeeze=False)
    image = None
    for i, m in enumerate(methods):
        for j, r in enumerate(regimes):
            ax, grid = axes[i, j], grids[m, r]
            image = ax.imshow(grid, cmap="Purples", vmin=0, vmax=top)
            for a in range(2):
                for b in range(2):
                    ax.text(b, a, f"{grid[a, b]:.0f}", ha="center", va="center",
                            color="white" if grid[a, b] > 0.6 * top else "black", fontsize=8)
            ax.set_xticks([0, 1], ["solved", "unsolved"] if i == len(methods) - 1 else ["", ""])
            ax.set_yticks([0, 1], ["solved", "unsolved"] if j == 0 else ["", ""])
            if i == 0:
                ax.set_title(r)
            if j == 0:
                ax.set_ylabel(f"{view.label(m)}\nbase")
            if i == len(methods) - 1:
                ax.set_xlabel("trained")
            for spine in ax.spines.values():
                spine.set_visible(False)
    if methods == ["(none)"]:
        _not_run(axes[0, 0])
    fig.suptitle("Base → trained transitions (seed mean, prompts)", fontsize=9)
    fig.tight_layout()
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, pad=0.03, label="prompts (seed mean)")
    return save(fig, folder, name)


def p_base_histogram(diag, folder: Path, name: str = "p_base_hist") -> list[Path]:
    """Calibration p_base with the regime thresholds (the coverage cutoff as a p_base line)."""
    reg, th = diag.regimes, diag.thresholds
    fig, ax = plt.subplots(figsize=(5.2, 2.6))
    p = reg["p_base"].to_numpy(float)
    # x = log10(p_base) resolves the boundary region; p_base = 0 gets its own bar at the left.
    lo = np.floor(np.log10(min(1e-3, 0.5 / max(th.coverage_k, 1))))
    x = np.where(p > 0, np.log10(np.clip(p, 10 ** lo, 1)), lo - 0.5)
    edges = np.concatenate([[lo - 0.75, lo - 0.25], np.linspace(lo, 0, 13 * int(-lo) + 1)])
    edges[-1] += 1e-9
    bottom = np.zeros(len(edges) - 1)
    for r in ("OutOfReach", "Boundary", "Reachable", "SolvedEasy"):
        h, _ = np.histogram(x[reg["regime"].to_numpy() == r], bins=edges)
        ax.bar(edges[:-1], h, width=np.diff(edges), bottom=bottom, align="edge", color=REGIME_COLOURS[r],
               label=f"{r} ({int(h.sum())})", lw=0)
        bottom += h
    ticks = np.arange(lo, 1)
    ax.set_xticks([lo - 0.5, *ticks], ["0", *[f"{10 ** t:g}" for t in ticks]])
    ax.set_xlim(lo - 0.85, 0.05)
    p_cov = 1 - (1 - th.coverage_min) ** (1 / th.coverage_k)  # coverage(p) = coverage_min here
    top = bottom.max() * 1.05 if bottom.size else 1
    ax.set_ylim(0, top)
    for xv, text in ((th.boundary, f"boundary {th.boundary:g}"), (th.easy, f"easy {th.easy:g}"),
                     (p_cov, f"coverage cut {p_cov:.3g}")):
        ax.axvline(np.log10(xv), color="0.2", ls="--", lw=0.7)
        ax.text(np.log10(xv), top * 0.98, text + " ", rotation=90, va="top", ha="right", fontsize=6)
    ax.set_xlabel(f"p_base ({diag.regime_source}; log scale, p_base = 0 at left)")
    ax.set_ylabel("prompts")
    ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title("Base success rate and regime thresholds")
    return save(fig, folder, name)


def strata_delta(diag, view, order, folder: Path, name: str = "strata_delta") -> list[Path]:
    """Continuous stratification: Δpass@1 and Δpass@K (points, seed mean +- SD) by p_base bin."""
    st, k_hi = diag.strata, max(diag.ks)
    order = [o for o in order if o in set(st["stratum"])]
    methods = [m for m in view.main if m in set(st["method"])]
    fig, axes = plt.subplots(1, 2, figsize=(7.0, 2.6), sharex=True)
    x = np.arange(len(order))
    width = 0.8 / max(len(methods), 1)
    for ax, k in zip(axes, (1, k_hi)):
        for i, m in enumerate(methods):
            sub = st[(st["method"] == m) & (st["metric"] == "delta_passk") & (st["k"] == k)].set_index("stratum")
            sub = sub.reindex(order)
            ax.bar(x + (i - (len(methods) - 1) / 2) * width, 100 * sub["mean"], width,
                   yerr=100 * sub["sd"].fillna(0), color=colour(m, view), label=view.label(m),
                   error_kw={"lw": 0.6, "capsize": 1.5})
        ax.axhline(0, color=GRAY, lw=0.6)
        ax.set_title(f"Δpass@{k} by p_base")
        ax.set_xticks(x, order, rotation=30, ha="right")
        ax.set_xlabel("p_base stratum")
        if not methods:
            _not_run(ax)
    axes[0].set_ylabel("trained − base (pts)")
    if methods:
        axes[1].legend(frameon=False)
    fig.tight_layout()
    return save(fig, folder, name)


TRAINING_PANELS = {"reward": "reward", "entropy": "entropy", "kl": "KL(π ‖ π_base)",
                   "protected_fraction": "protected fraction"}
NOT_LOGGED = {"kl": "not logged:\nno method scored\nthe frozen base\n(a KL term, the policy\nanchor or train.\nlog_base_kl does)"}
# train.log_base_kl's k1 on every policy rollout: where logged, the KL panel shows it (the same
# quantity for every method) instead of `kl`, which covers only the rows a term scored.
BASE_KL = "kl_base_k1"


def training_curves(logs, view, folder: Path, name: str = "training") -> list[Path]:
    """Reward, entropy, KL to the base and protected fraction over steps (seed mean) from train
    logs; every panel is drawn, and one whose quantity no run logged says why (KL is logged
    where training scores the frozen base; train.log_base_kl's k1, where logged, is shown)."""
    cols = list(TRAINING_PANELS) if len(logs) else []
    if BASE_KL in logs.columns and logs[BASE_KL].notna().any():
        logs = logs.assign(kl=logs[BASE_KL])
    fig, axes = plt.subplots(1, max(len(cols), 1), figsize=(2.3 * max(len(cols), 1), 2.2), squeeze=False)
    for ax, col in zip(axes[0], cols):
        ax.set_title(TRAINING_PANELS[col])
        ax.set_xlabel("step")
        if col not in logs.columns or not logs[col].notna().any():
            _not_run(ax, NOT_LOGGED.get(col, "not logged"))
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        for m, g in logs.groupby("method", sort=False):
            # Steps a quantity is not logged on (log_base_kl_every) are left out, not gaps.
            s = g[g[col].notna()].groupby("step")[col].agg(["mean", "std"]).reset_index()
            c = colour(m, view)
            ax.plot(s["step"], s["mean"], color=c, lw=1, label=view.label(m))
            ax.fill_between(s["step"], s["mean"] - s["std"].fillna(0), s["mean"] + s["std"].fillna(0),
                            color=c, alpha=0.15, lw=0)
    if not cols:
        _not_run(axes[0, 0], "no training logs")
    drawn = next((ax for ax in axes[0] if ax.get_legend_handles_labels()[1]), axes[0, 0])
    _legend_below(fig, drawn, 0.1)  # inside a panel, it covered that panel's curves
    return save(fig, folder, name)


def methods_ranking(ranked, base_passk1, view, bench_label: str, k_hi: int, folder: Path,
                    name: str = "methods_ranking") -> list[Path]:
    """Every method's benchmark pass@1 (left) and boundary Δpass@K (right), seed mean with the
    seed-level 95% interval, sorted by the boundary (best at the top): tables.ranked_methods."""
    n = max(len(ranked), 1)
    fig, axes = plt.subplots(1, 2, figsize=(7.0, 0.9 + 0.28 * n), sharey=True)
    y = np.arange(len(ranked))[::-1]
    for ax, q, title in ((axes[0], "passk1", f"{bench_label} pass@1 (%)"),
                         (axes[1], "boundary_delta", f"Boundary Δpass@{k_hi} vs base (pts)")):
        for yi, r in zip(y, ranked.itertuples()):
            mean, lo, hi = (100 * getattr(r, f"{q}_{c}") for c in ("mean", "ci_low", "ci_high"))
            c = colour(r.method, view)
            if np.isfinite(lo):
                ax.plot([lo, hi], [yi, yi], color=c, lw=1.2, alpha=0.7)
            ax.plot(mean, yi, "o" if np.isfinite(lo) else "D", color=c, ms=4)
        ax.axvline(0 if q == "boundary_delta" else 100 * base_passk1, color=GRAY, ls="--", lw=0.7)
        ax.set_title(title)
        ax.grid(True, axis="x", color="0.9", lw=0.5)
    axes[0].set_yticks(y, list(ranked["label"]) if len(ranked) else [])
    fig.text(0.99, 0.005, "dot: seed mean; bar: seed-level 95% t interval (diamond: one seed); dashed: base",
             ha="right", va="bottom", color=GRAY, fontsize=6)
    if not len(ranked):
        _not_run(axes[0], "no method evaluated")
    elif ranked["boundary_delta_mean"].isna().all():
        _not_run(axes[1], "no Boundary prompts")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return save(fig, folder, name)


CELL_COLOURS = {"kept": "#56B4E9", "lost": "#D55E00", "gained": "#009E73", "never": "#bdbdbd"}


def _seed_mean(table, method):
    return table[(table["method"] == method) & table["seed"].isna()]


def delta_curves(diag, view, folder: Path, name: str = "delta_curves") -> list[Path]:
    """Δpass@k at every k <= K (seed mean), the crossover k* with its interval, and the
    signed area between the curves over log k."""
    fig, ax = plt.subplots(figsize=(4.6, 2.8))
    methods = [m for m in view.main if m in set(diag.curves["method"])]
    for m in methods:
        cur = _seed_mean(diag.curves, m)
        k, d = cur["k"].to_numpy(float), 100 * cur["delta"].to_numpy(float)
        c = colour(m, view)
        ax.plot(k, d, color=c, lw=1.3, label=view.label(m))
        ax.fill_between(k, 0, d, color=c, alpha=0.12, lw=0)
        x = _seed_mean(diag.crossover, m)
        if len(x) and np.isfinite(x["kstar"].iloc[0]):
            r = x.iloc[0]
            ax.axvline(r["kstar"], color=c, ls="--", lw=0.8)
            hi = r["kstar_high"] if np.isfinite(r["kstar_high"]) else k.max()
            ax.axvspan(r["kstar_low"], hi, color=c, alpha=0.08, lw=0)
            ax.annotate(f"k*={int(r['kstar'])}", (r["kstar"], 0), textcoords="offset points", xytext=(3, 6),
                        color=c, fontsize=7)
    ax.axhline(0, color=GRAY, lw=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k samples")
    ax.set_ylabel("trained − base pass@k (pts)")
    ax.set_title("Δpass@k, crossover k* (dashed; band: interval)")
    ax.grid(True, color="0.9", lw=0.5)
    if methods:
        ax.legend(frameon=False)
    else:
        _not_run(ax)
    return save(fig, folder, name)


def attribution_bars(diag, view, folder: Path, name: str = "attribution") -> list[Path]:
    """Where Δpass@k comes from (seed mean, points): stacked contributions of the regimes (top)
    and of the transition cells (bottom) at each k; the dot is the total with its interval."""
    a = diag.attribution
    methods = [m for m in view.main if m in set(a["method"])] or ["(none)"]
    fig, axes = plt.subplots(2, len(methods), figsize=(3.0 * len(methods) + 0.8, 4.6), squeeze=False, sharey="row")
    regimes = [r for r in REGIMES if r in set(a["regime"])]
    for j, m in enumerate(methods):
        sub = a[(a["method"] == m) & a["seed"].isna() & (a["quantity"] == "delta_passk")]
        for i, (parts, key, other, colours) in enumerate(
                [(regimes, "regime", "cell", REGIME_COLOURS), (list(CELL_COLOURS), "cell", "regime", CELL_COLOURS)]):
            ax = axes[i, j]
            x = np.arange(len(diag.ks))
            up, down = np.zeros(len(x)), np.zeros(len(x))
            for part in parts:
                v = sub[(sub[key] == part) & (sub[other] == "all")].set_index("k").reindex(diag.ks)["value"]
                v = 100 * v.fillna(0).to_numpy(float)
                base = np.where(v >= 0, up, down)
                ax.bar(x, v, 0.65, bottom=base, color=colours[part], label=part, lw=0)
                up, down = up + np.clip(v, 0, None), down + np.clip(v, None, 0)
            tot = sub[(sub["regime"] == "all") & (sub["cell"] == "all")].set_index("k").reindex(diag.ks)
            # clipped: a run equal to the base has a [0, 0] interval a rounding error outside its 0
            ax.errorbar(x, 100 * tot["value"], yerr=np.clip([100 * (tot["value"] - tot["boot_low"]),
                                                             100 * (tot["boot_high"] - tot["value"])], 0, None),
                        fmt="o", color="black", ms=3, capsize=2, lw=0.8, label="total")
            ax.axhline(0, color=GRAY, lw=0.6)
            ax.set_xticks(x, [f"p@{k}" for k in diag.ks])
            if i == 0:
                ax.set_title(view.label(m))
            if j == 0:
                ax.set_ylabel(f"Δpass@k by {key} (pts)")
            if j == len(methods) - 1:
                ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=6)
            if m == "(none)":
                _not_run(ax)
    fig.tight_layout()
    return save(fig, folder, name)


def write_diagnose_figures(diag, view, folder: Path) -> list[Path]:
    paths = passk_curves(diag, view, "pass@k over every prompt", folder, "passk_curves")
    if view.baseline and view.method:
        paths += paired_gain(diag, view, folder, "paired_gain")
    if diag.attribution is not None:
        paths += delta_curves(diag, view, folder) + attribution_bars(diag, view, folder)
    if diag.regimes is not None:
        paths += regime_passk(diag, view, folder) + transition_heatmaps(diag, view, folder)
        paths += p_base_histogram(diag, folder)
        from boundary.analysis.regimes import strata_order
        paths += strata_delta(diag, view, strata_order(diag.bins), folder)
    return paths


def placeholder(folder: Path, name: str, text: str) -> list[Path]:
    """A figure that says why it is empty (a benchmark that was not run)."""
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.axis("off")
    _not_run(ax, text)
    return save(fig, folder, name)
