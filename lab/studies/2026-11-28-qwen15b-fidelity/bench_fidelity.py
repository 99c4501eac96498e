"""Sampler fidelity (issue 41, item 2): the calibrate stage's samples against stock `generate`.

On the same prompts, with the same temperature, top-p, n and max_new_tokens (the config's
calibration and sampling sections, resolved as the calibrate stage resolves them):
- project: the calibrate stage's own sample-and-verify path (`scoring.scored_samples` with
  `sampling_params`, the config's backend and batch size; `auto` on a GPU);
- stock: transformers' `model.generate` (bf16 on a GPU, fp32 on a CPU, its default attention,
  do_sample with only temperature and top-p: top_k 0, no other processor), one prompt a call
  in n identical rows, so no padding enters (left-padded bf16 batches moved SmolLM2's totals
  by 20%); the same extractor and Verifier score both.

Per prompt: c and n of each, the two-sided Fisher exact p-value (scipy), mean completion
length and its SD, completions cut at max_new_tokens, and the regime label each run gives
(the config's cuts). Totals: the pooled success rates and their difference with a 95% interval
(the prompts are the same on both sides, so only each prompt's own binomial noise enters:
Var = sum_i n_i s_i^2 / N^2 per side, s_i^2 the prompt's sample variance), the same for mean
completion length (a length shift is the usual symptom of a broken sampler), the number of
prompts at Fisher p < 0.05 against the at most 5% expected when the samplers agree, and two
combined tests over all prompts under the Fisher tests' own null (each prompt's table with its
margins fixed, project successes hypergeometric), from 100,000 draws of that null rather than
a large-sample formula that 0/256 and 256/256 prompts break:
- direction: sum_i (c_i - E_i), the Cochran-Mantel-Haenszel numerator: one sampler more
  often right across prompts (its asymptotic chi-square is printed too);
- omnibus: sum_i (c_i - E_i)^2 / V_i: differences of either sign on different prompts, which
  cancel in the direction test (e.g. a wrong temperature: easy prompts up, hard ones down).
The samplers agree within noise unless one of the two has p < 0.025 (0.05, Bonferroni over
the two).

Usage (the lead's device run: lab/studies/2026-11-28-qwen15b-fidelity/sampler_against_generate.sh; lab/studies/2026-11-28-qwen15b-fidelity/check_sampler_fidelity.md):

    # here, on a CPU: the split, as the workflow's data stage makes it (first K prompts)
    PYTHONPATH=workflow python lab/studies/2026-11-28-qwen15b-fidelity/bench_fidelity.py --make-split results/qwen15b_fidelity/diagnostic.parquet \
        --model models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf --data ../shared/data/gsm8k/test.jsonl
    # one GPU: both halves, then the comparison, into --out
    PYTHONPATH=workflow python lab/studies/2026-11-28-qwen15b-fidelity/bench_fidelity.py --model BASE --split SPLIT --out DIR
    # or in parts (each resumes what DIR holds): --only project; --only stock [--shard I/K]
    # [--deadline S] (one process a shard, several on one GPU); --only compare (any machine)
    # a CPU, a tiny model, in seconds: --cpu --config config/config.yaml --n 16 --max-new-tokens 4

DIR holds project.parquet and project.json (the stage's samples and timing), stock/NNNN.parquet
(one a prompt, its generate time in columns), fidelity.csv (per prompt) and totals.csv.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "workflow"))

from boundary.core.errors import BoundaryError, warn  # noqa: E402

LEVEL = 0.95
DRAWS = 100_000  # draws of the conditional null of the combined tests
FISHER_ALPHA = 0.05
AGREE_ALPHA = 0.025  # each combined test: 0.05 over the two
STOCK_SEED_STRIDE = 100_003  # stock prompt i, chunk j: torch seed = calibration seed + stride * (i + 1) + j


# ----------------------------------------------------------------------------- settings, split

def resolved(config_path: str | None, n: int | None = None, max_new_tokens: int | None = None) -> dict:
    """The calibrate stage's complete settings of the diagnostic split (a full run: the adaptive
    rule only decides how many of the same draws are kept), the regimes' cuts and the prompt
    settings; --n and --max-new-tokens override (the CPU path)."""
    from boundary.core import settings
    from boundary.core.config import load_config

    config = load_config(config_path or ROOT / "lab" / "studies" / "2026-11-28-qwen15b-preregistration" / "qwen15b.yaml")
    config["calibration"]["adaptive"] = False
    if n is not None:
        config["calibration"]["n"] = n
    if max_new_tokens is not None:
        config["sampling"]["max_new_tokens"] = max_new_tokens
    s = settings.resolve("calibrate", settings.calibrate_key(config, "diagnostic"))
    s["regimes"] = settings.resolve("regimes", settings.regimes_key(config))
    s["prompt"] = config["prompt"]
    return s


def described(s: dict) -> dict:
    """What both halves must share (checked before they are compared)."""
    cal = s["calibration"]
    return {"n": cal["n"], "temperature": cal["temperature"], "top_p": cal["top_p"],
            "max_new_tokens": s["sampling"]["max_new_tokens"], "extractor": s["verify"]["extractor"]}


def first_prompts(path: str, k: int):
    from boundary.core.artifacts import read_table

    split = read_table(path, ["prompt_id", "problem", "prompt", "answer"], nonempty=True)
    return split.head(k).reset_index(drop=True)


def check_prompts(split, prompt: dict, model: str) -> None:
    """The split's prompts are the data stage's rendering with this model's tokenizer (a split
    made here from the GGUF's tokenizer is checked against the imported model's on the GPU)."""
    from boundary.stages.data import render_prompts

    again = render_prompts(split["problem"], prompt, model)
    wrong = [pid for pid, a, b in zip(split["prompt_id"], split["prompt"], again) if a != b]
    if wrong:
        raise BoundaryError(f"split: {len(wrong)} prompts (first {wrong[0]}) differ from the config's prompt "
                            f"settings rendered with {model}'s tokenizer: remake the split (--make-split)")


def regime_split(run: str, regime: str, k: int):
    """A finished pipeline run's diagnostic prompts of one regime (its splits/diagnostic.parquet,
    as its data stage rendered them, and its regimes/regimes.parquet), at most k, in split order:
    the follow-up check on the prompts a study's primary quantity lives on."""
    from boundary.analysis.regimes import REGIMES
    from boundary.core.artifacts import read_table

    if regime not in REGIMES:
        raise BoundaryError(f"--regime {regime}: one of {', '.join(REGIMES)}")
    split = read_table(Path(run) / "splits" / "diagnostic.parquet", ["prompt_id", "problem", "prompt", "answer"],
                       nonempty=True)
    labels = read_table(Path(run) / "regimes" / "regimes.parquet", ["prompt_id", "regime"], nonempty=True)
    chosen = set(labels.loc[labels["regime"] == regime, "prompt_id"])
    picked = split[split["prompt_id"].isin(chosen)]
    if picked.empty:
        raise BoundaryError(f"{run}: no diagnostic prompt is {regime}")
    if len(picked) > k:
        warn(f"{run}: {len(picked)} {regime} prompts, the first {k} kept (--prompts)")
    return picked.head(k).reset_index(drop=True)


# --data's format: GSM8K's test file, as the check was defined and first run (issue 41, item 2)
GSM8K_TEST = {"problem_field": "question", "answer_field": "answer", "answer_format": "gsm8k", "source": "gsm8k",
              "id_field": None}


def make_split(args) -> None:
    """The diagnostic split's first --prompts rows, by the data stage itself (its settings from
    the config, data.diagnostic.limit set to --prompts). The chat template comes from --model:
    a model folder, or a GGUF whose tokenizer alone is read (seconds, not the model's import).
    With --from-run and --regime: that run's prompts of the regime instead (regime_split)."""
    import tempfile

    from boundary.core.artifacts import write_table

    if args.from_run:
        split = regime_split(args.from_run, args.regime, args.prompts)
        write_table(split, args.make_split)
        print(f"split: {len(split)} {args.regime} prompts of {args.from_run} -> {args.make_split}")
        return

    from boundary.core import settings
    from boundary.core.config import load_config
    from boundary.stages.data import build_splits

    config = load_config(args.config or ROOT / "lab" / "studies" / "2026-11-28-qwen15b-preregistration" / "qwen15b.yaml")
    key = settings.data_key(config, "diagnostic")
    spec = key["data"]["diagnostic"]
    spec["limit"] = args.prompts
    if args.data:  # the check's own prompts, whatever task the config diagnoses (none of its labels)
        for field in ("cluster_field", "skill_field"):
            spec.pop(field, None)
        spec.update(path=args.data, **GSM8K_TEST)
    with tempfile.TemporaryDirectory() as tokenizer_dir:
        model = args.model
        if model and Path(model).suffix == ".gguf":
            from transformers import AutoTokenizer

            path = Path(model)
            AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).save_pretrained(tokenizer_dir)
            model = tokenizer_dir
        split = build_splits(settings.resolve("data", key), model)["diagnostic"]
    write_table(split, args.make_split)
    print(f"split: {len(split)} prompts of {spec['path']} -> {args.make_split} "
          f"({Path(args.make_split).stat().st_size:,} bytes)")


# ----------------------------------------------------------------------------- the project's sampler

def run_project(args, s: dict, split, out: Path) -> None:
    """The calibrate stage's sample-and-verify (stages/calibrate.py, main_calibrate) on the split."""
    from boundary.core.artifacts import write_json, write_table
    from boundary.sampling.scoring import sampling_params, scored_samples, verifier_for

    if (out / "project.json").is_file():
        print(f"project: {out / 'project.json'} present, kept")
        return
    cal, sampling = s["calibration"], dict(s["sampling"])
    if args.batch_size:
        sampling["batch_size"] = args.batch_size if args.batch_size == "auto" else int(args.batch_size)
    seed = cal["seed"] if args.seed is None else args.seed
    params = sampling_params(cal, sampling, seed, cal["n"])
    lines = []
    start = time.perf_counter()
    with verifier_for(s) as verifier:
        samples = scored_samples(args.model, split, params, s["verify"]["extractor"], verifier,
                                 log=lines.append, label=args.split)
    wall = time.perf_counter() - start
    for line in lines:
        if line.startswith(("sampling (", "warning")):
            print(f"project: {line}")
    sampler = next((line for line in lines if line.startswith("sampling (") and " tokens in " in line), "")
    seconds = re.search(r" tokens in ([\d.]+) s", sampler)
    write_table(samples, out / "project.parquet")
    write_json({"settings": described(s), "wall_s": wall, "sampling_s": float(seconds[1]) if seconds else None,
                "sampler": sampler, "batch_size": str(params.batch_size),
                "decode_attention": decode_attention_name(), "seed": seed}, out / "project.json")
    print(f"project: {len(samples):,} completions, {int(samples['n_tokens'].sum()):,} tokens; wall {wall:.1f} s "
          "(model load, sampling, verification)")


def decode_attention_name() -> str:
    """The sampler's decode attention arithmetic ($BOUNDARY_SEAT_ATTENTION, read at its import):
    which one drew the project's half."""
    from boundary.sampling import hf

    return hf.SEAT_ATTENTION


# ----------------------------------------------------------------------------- stock generate

def stock_model(path: str, device: str):
    """The imported folder as transformers loads it, nothing of the project's sampler: bf16 on a
    GPU, fp32 on a CPU (as the project's `load_model`), the default attention. Its generation
    config holds the stop and pad ids only, so no setting of the model's enters `generate`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from boundary.sampling.hf import stop_and_pad

    tokenizer = AutoTokenizer.from_pretrained(path)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    stop, pad = stop_and_pad(model, tokenizer)
    model.generation_config = GenerationConfig(eos_token_id=stop, pad_token_id=pad,
                                               bos_token_id=model.generation_config.bos_token_id)
    return model, tokenizer, stop, pad


def stock_completions(model, tokenizer, prompt: str, s: dict, rows: int, seed: int, stop: list[int], pad: int):
    """n completions of one prompt by `generate`, `rows` identical rows a call: (token lists, each
    up to and including its first stop id; seconds spent in `generate`)."""
    import torch

    cal = s["calibration"]
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]  # as the project's sampler encodes
    completions, seconds = [], 0.0
    for chunk, lo in enumerate(range(0, cal["n"], rows)):
        m = min(rows, cal["n"] - lo)
        batch = torch.tensor([ids] * m, device=model.device)
        torch.manual_seed(seed + chunk)
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=batch, attention_mask=torch.ones_like(batch), do_sample=True,
                                 temperature=cal["temperature"], top_p=cal["top_p"], top_k=0,
                                 max_new_tokens=s["sampling"]["max_new_tokens"], eos_token_id=stop, pad_token_id=pad)
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        seconds += time.perf_counter() - start
        for row in out[:, len(ids):].tolist():
            end = next((i + 1 for i, t in enumerate(row) if t in stop), len(row))
            completions.append(row[:end])
    return completions, seconds


def run_stock(args, s: dict, split, out: Path, device: str) -> None:
    """Stock `generate` on this shard's prompts (rows I, I+K, ... of the split), one file a
    prompt; prompts whose file exists are kept; at most --max-prompts of them; with --deadline
    (seconds after the process started), no prompt is begun that the slowest one so far says
    would end after it."""
    import pandas as pd
    import torch

    from boundary.core.artifacts import write_json, write_table
    from boundary.sampling import COMPLETION_COLUMNS, process_seconds
    from boundary.sampling.scoring import parse_shard
    from boundary.tasks.verify import Verifier, score_samples, unextracted_warning

    began = time.monotonic() - (process_seconds() or 0.0)  # the process's start, as `timeout` counts
    index, count = parse_shard(args.shard)
    folder = out / "stock"
    folder.mkdir(parents=True, exist_ok=True)
    write_json({"settings": described(s), "rows": args.rows or s["calibration"]["n"]}, folder / f"settings-{index}.json")
    todo = [i for i in range(index, len(split), count) if not (folder / f"{i:04d}.parquet").is_file()]
    if not todo:
        print(f"stock {index}/{count}: every prompt present")
        return
    start = time.perf_counter()
    model, tokenizer, stop, pad = stock_model(args.model, device)
    print(f"stock {index}/{count}: model loaded in {time.perf_counter() - start:.1f} s; {len(todo)} prompts to do; "
          f"stop ids {stop}, pad {pad}")
    verify, rows = s["verify"], args.rows or s["calibration"]["n"]
    verifier = Verifier(timeout=verify["timeout"], workers=max(1, verify["workers"] // count))
    slowest = 0.0
    try:
        for i in todo[:args.max_prompts]:
            if args.deadline and time.monotonic() - began + 1.1 * slowest > args.deadline:
                print(f"stock {index}/{count}: deadline: stopped before prompt {i} ({split['prompt_id'][i]})")
                break
            row = split.iloc[i]
            t0, started = time.monotonic(), time.time()
            while True:  # out of memory: half the rows a call, from this prompt on (still identical rows)
                try:
                    tokens, seconds = stock_completions(model, tokenizer, row["prompt"], s, rows,
                                                        s["calibration"]["seed"] + STOCK_SEED_STRIDE * (i + 1), stop, pad)
                    break
                except torch.cuda.OutOfMemoryError:
                    if rows == 1:
                        raise
                    rows = (rows + 1) // 2
                    torch.cuda.empty_cache()
                    print(f"stock {index}/{count}: out of GPU memory at prompt {i}; {rows} rows a call from here")
            texts = tokenizer.batch_decode(tokens, skip_special_tokens=True)
            frame = pd.DataFrame([(row["prompt_id"], k, text, len(t), "stop" if t and t[-1] in stop else "length",
                                   float("nan")) for k, (t, text) in enumerate(zip(tokens, texts))],
                                 columns=COMPLETION_COLUMNS)
            frame = score_samples(frame, {row["prompt_id"]: row["answer"]}, verify["extractor"], verifier,
                                  log=lambda *_: None)
            frame["generate_s"], frame["started"], frame["rows"] = seconds, started, rows
            write_table(frame, folder / f"{i:04d}.parquet")
            slowest = max(slowest, time.monotonic() - t0)
            print(f"stock {index}/{count}: prompt {i} ({row['prompt_id']}): {int(frame['correct'].sum())}/{len(frame)} "
                  f"correct, {int(frame['n_tokens'].sum()):,} tokens in {seconds:.1f} s "
                  f"({frame['n_tokens'].sum() / seconds:,.0f} tok/s), longest {frame['n_tokens'].max()}")
            message = unextracted_warning(frame["answer"], verify["extractor"], row["prompt_id"])
            if message:
                warn(message)
    finally:
        verifier.close()


# ----------------------------------------------------------------------------- statistics

def fisher_p(c1, n1, c2, n2):
    """Two-sided Fisher exact p-value of each prompt's 2x2 table (scipy: tables as likely or
    less likely than the one seen, margins fixed)."""
    import numpy as np
    from scipy import stats

    return np.array([stats.fisher_exact([[a, m - a], [b, k - b]])[1] for a, m, b, k in zip(c1, n1, c2, n2)])


def stratified_difference(n1, sum1, sumsq1, n2, sum2, sumsq2, level: float = LEVEL):
    """Pooled means of two samples of the same prompts (sums and sums of squares per prompt),
    their difference and its normal interval: prompts fixed, so each side's variance is
    sum_i n_i s_i^2 / N^2, s_i^2 a prompt's sample variance (0/1 outcomes: sumsq = c)."""
    import numpy as np
    from scipy import stats

    def side(n, total, squares):
        n, total, squares = (np.asarray(x, float) for x in (n, total, squares))
        within = np.where(n > 1, (squares - total ** 2 / n) / np.maximum(n - 1, 1), 0.0)
        return total.sum() / n.sum(), (n * within).sum() / n.sum() ** 2

    (m1, v1), (m2, v2) = side(n1, sum1, sumsq1), side(n2, sum2, sumsq2)
    half = stats.norm.ppf(0.5 + level / 2) * np.sqrt(v1 + v2)
    return m1, m2, m1 - m2, m1 - m2 - half, m1 - m2 + half


def conditional_tests(c1, n1, c2, n2, draws: int = DRAWS, seed: int = 0) -> dict:
    """The combined tests of the module docstring: under the null each prompt's project count is
    hypergeometric given its margins (the Fisher tests' null); p-values from `draws` draws,
    (1 + at least as extreme) / (1 + draws). Prompts with one outcome only carry no information."""
    import numpy as np
    from scipy import stats

    c1, n1, c2, n2 = (np.asarray(x, np.int64) for x in (c1, n1, c2, n2))
    total, good = n1 + n2, c1 + c2
    expected = n1 * good / total
    var = n1 * n2 * good * (total - good) / (total ** 2 * np.maximum(total - 1, 1))
    informative = var > 0
    rng = np.random.default_rng(seed)
    null = rng.hypergeometric(good, total - good, n1, size=(draws, len(c1))) - expected
    seen = c1 - expected
    direction, omnibus = seen.sum(), (seen[informative] ** 2 / var[informative]).sum()
    tol = 1e-9 * (1 + abs(direction) + omnibus)  # sums of the same terms in another order
    null_direction = np.abs(null.sum(axis=1))
    null_omnibus = (null[:, informative] ** 2 / var[informative]).sum(axis=1)
    cmh = direction ** 2 / var.sum() if var.sum() > 0 else 0.0
    return {"cmh_chi2": cmh, "cmh_p": float(stats.chi2.sf(cmh, 1)),
            "direction_p": (1 + int((null_direction >= abs(direction) - tol).sum())) / (1 + draws),
            "omnibus_p": (1 + int((null_omnibus >= omnibus - tol).sum())) / (1 + draws),
            "informative_prompts": int(informative.sum()), "draws": draws}


# ----------------------------------------------------------------------------- comparison

def per_prompt(samples, prefix: str):
    """n, c, success rate, mean/SD tokens and completions cut at the cap of each prompt."""
    g = samples.assign(capped=samples["finish_reason"] == "length").groupby("prompt_id", sort=False)
    table = g.agg(n=("correct", "size"), c=("correct", "sum"), tokens=("n_tokens", "mean"),
                  tokens_sd=("n_tokens", "std"), capped=("capped", "sum"))
    table["c"], table["capped"] = table["c"].astype(int), table["capped"].astype(int)
    table.insert(2, "rate", table["c"] / table["n"])
    return table.add_suffix(f"_{prefix}")


def read_halves(split, out: Path, s: dict):
    """The project's samples and the stock prompts done, on the prompts both hold; a half
    made with other settings is refused, a prompt missing from either is one warning."""
    import pandas as pd

    from boundary.core.artifacts import read_table

    want = described(s)
    files = sorted((out / "stock").glob("[0-9]*.parquet"))
    if not (out / "project.json").is_file() or not files:
        raise BoundaryError(f"{out}: needs project.json and stock/*.parquet (run --only project and --only stock)")
    project_info = json.loads((out / "project.json").read_text())
    infos = [project_info] + [json.loads(p.read_text()) for p in sorted((out / "stock").glob("settings-*.json"))]
    for info in infos:
        if info["settings"] != want:
            raise BoundaryError(f"{out}: made with {info['settings']}, not this run's {want}")
    project = read_table(out / "project.parquet", ["prompt_id", "correct", "n_tokens", "finish_reason", "answer"])
    stock = pd.concat([read_table(p) for p in files], ignore_index=True)
    ids = [p for p in split["prompt_id"] if p in set(project["prompt_id"]) and p in set(stock["prompt_id"])]
    if len(ids) < len(split):
        warn(f"{out}: {len(ids)} of the split's first {len(split)} prompts have both halves; compared on those")
    return project, stock, ids, project_info


def comparison(project, stock, ids, s: dict, draws: int = DRAWS):
    """(per-prompt table, totals dict) of two runs' scored samples on the prompts `ids`."""
    from scipy import stats

    from boundary.analysis.regimes import Thresholds, label

    table = per_prompt(project, "project").join(per_prompt(stock, "stock")).reindex(ids)
    table.index.name = "prompt_id"
    table["fisher_p"] = fisher_p(table["c_project"], table["n_project"], table["c_stock"], table["n_stock"])
    th = Thresholds.from_dict(s["regimes"])
    for side in ("project", "stock"):
        table[f"regime_{side}"] = label(table[f"rate_{side}"], th)
    k = len(table)
    below = int((table["fisher_p"] < FISHER_ALPHA).sum())
    rate = stratified_difference(table["n_project"], table["c_project"], table["c_project"],
                                 table["n_stock"], table["c_stock"], table["c_stock"])
    sq = {side: (table[f"n_{side}"] - 1) * table[f"tokens_sd_{side}"].fillna(0) ** 2
          + table[f"n_{side}"] * table[f"tokens_{side}"] ** 2 for side in ("project", "stock")}
    length = stratified_difference(table["n_project"], table["n_project"] * table["tokens_project"], sq["project"],
                                   table["n_stock"], table["n_stock"] * table["tokens_stock"], sq["stock"])
    tests = conditional_tests(table["c_project"], table["n_project"], table["c_stock"], table["n_stock"], draws)
    totals = {"prompts": k, **{f"{x}_{side}": int(table[f"{x}_{side}"].sum()) for side in ("project", "stock")
                               for x in ("n", "c", "capped")},
              **dict(zip(["rate_project", "rate_stock", "rate_diff", "rate_diff_low", "rate_diff_high"], rate)),
              "fisher_below_05": below, "fisher_expected_below_05": FISHER_ALPHA * k,
              "fisher_below_05_tail_p": float(stats.binom.sf(below - 1, k, FISHER_ALPHA)), **tests,
              **dict(zip(["tokens_project", "tokens_stock", "tokens_diff", "tokens_diff_low", "tokens_diff_high"],
                         length)),
              "regimes_agree": int((table["regime_project"] == table["regime_stock"]).sum())}
    totals["agree"] = bool(min(tests["direction_p"], tests["omnibus_p"]) >= AGREE_ALPHA)
    table, spread = concentration(table, project, stock)
    return table.reset_index(), {**totals, **spread}


def concentration(table, project, stock):
    """Secondary, outside the verdict: how concentrated each sampler's answers are. A sampler
    drawing from a broader distribution than the other (a hotter temperature, a wider nucleus,
    noisier logits) gives each prompt's most common answer a smaller share (`modal_share`,
    core.passk.counts_of's: each side's own modal answer) and moves success rates toward 0.5
    on both sides of it, which the direction test cannot see and the omnibus test sees only
    as spread. Paired over prompts, Wilcoxon signed-rank p-values (two-sided, ties dropped)."""
    import numpy as np
    from scipy import stats

    from boundary.core.passk import counts_of

    for side, samples in (("project", project), ("stock", stock)):
        table[f"modal_share_{side}"] = counts_of(samples).set_index("prompt_id")["modal_share"].reindex(table.index)
    modal = table["modal_share_project"] - table["modal_share_stock"]
    pooled = (table["c_project"] + table["c_stock"]) / (table["n_project"] + table["n_stock"])
    toward = (table["rate_project"] - table["rate_stock"]) * np.sign(0.5 - pooled)

    def signed_rank_p(d):
        d = d[d != 0]
        return float(stats.wilcoxon(d).pvalue) if len(d) else float("nan")

    return table, {"modal_share_project": float(table["modal_share_project"].mean()),
                   "modal_share_stock": float(table["modal_share_stock"].mean()),
                   "modal_lower": int((modal < 0).sum()), "modal_higher": int((modal > 0).sum()),
                   "modal_p": signed_rank_p(modal), "toward_half": int((toward > 0).sum()),
                   "away_from_half": int((toward < 0).sum()), "toward_half_p": signed_rank_p(toward)}


def timings(project_info: dict, project, stock) -> dict:
    """Wall time and tok/s of each: the project's from its stage call and sampler line, the
    stock one's from each prompt's generate time and the union of the intervals it ran in (its
    wall time however many processes shared the GPU and however many calls it took)."""
    per = stock.groupby("prompt_id").agg(seconds=("generate_s", "first"), started=("started", "first"))
    spans = sorted((t, t + d) for t, d in zip(per["started"], per["seconds"]))
    busy, end = 0.0, float("-inf")
    for lo, hi in spans:
        busy += max(0.0, hi - max(lo, end))
        end = max(end, hi)
    tokens, sampling = int(stock["n_tokens"].sum()), project_info["sampling_s"]
    return {"project_wall_s": project_info["wall_s"], "project_sampling_s": sampling,
            "project_tok_s": int(project["n_tokens"].sum()) / sampling if sampling else float("nan"),
            "stock_generate_s": float(per["seconds"].sum()), "stock_wall_s": busy,
            "stock_tok_s_per_call": tokens / float(per["seconds"].sum()), "stock_tok_s": tokens / busy}


def compare(args, s: dict, split, out: Path) -> None:
    import pandas as pd

    from boundary.analysis.regimes import REGIMES
    from boundary.core.artifacts import write_table

    project, stock, ids, project_info = read_halves(split, out, s)
    table, totals = comparison(project, stock, ids, s, args.draws)
    totals.update(timings(project_info, project, stock))
    write_table(table, out / "fidelity.csv")
    write_table(pd.DataFrame([totals]), out / "totals.csv")
    t = totals
    print(f"settings: {described(s)}; project batch {project_info['batch_size']}, decode attention "
          f"{project_info.get('decode_attention', 'matmul (not recorded)')}, seed "
          f"{project_info.get('seed', s['calibration']['seed'])}")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.float_format", "{:.4g}".format):
        print(table.drop(columns=["tokens_sd_project", "tokens_sd_stock"]).to_string(index=False))
    print(pd.crosstab(pd.Categorical(table["regime_project"], REGIMES), pd.Categorical(table["regime_stock"], REGIMES),
                      rownames=["project"], colnames=["stock"], dropna=False).to_string())
    print(f"prompts: {t['prompts']}; correct: project {t['c_project']:,} of {t['n_project']:,} "
          f"({t['rate_project']:.4f}), stock {t['c_stock']:,} of {t['n_stock']:,} ({t['rate_stock']:.4f}); "
          f"difference {t['rate_diff']:+.4f}, 95% CI [{t['rate_diff_low']:+.4f}, {t['rate_diff_high']:+.4f}]")
    print(f"Fisher p < 0.05: {t['fisher_below_05']} of {t['prompts']} prompts (at most {t['fisher_expected_below_05']:.1f} "
          f"expected when they agree; P(>= {t['fisher_below_05']}) <= {t['fisher_below_05_tail_p']:.3f})")
    print(f"combined ({t['draws']:,} draws of the conditional null, {t['informative_prompts']} prompts with both "
          f"outcomes): direction p = {t['direction_p']:.4f} (CMH chi2 {t['cmh_chi2']:.2f}, asymptotic p "
          f"{t['cmh_p']:.4f}); omnibus p = {t['omnibus_p']:.4f}")
    print(f"mean completion: project {t['tokens_project']:.1f}, stock {t['tokens_stock']:.1f} tokens; difference "
          f"{t['tokens_diff']:+.1f} [{t['tokens_diff_low']:+.1f}, {t['tokens_diff_high']:+.1f}]; cut at "
          f"max_new_tokens: {t['capped_project']} and {t['capped_stock']}")
    print(f"regime labels agree on {t['regimes_agree']} of {t['prompts']} prompts")
    print(f"secondary, not in the verdict: modal answer's share project {t['modal_share_project']:.3f}, stock "
          f"{t['modal_share_stock']:.3f} (project lower on {t['modal_lower']}, higher on {t['modal_higher']} prompts; "
          f"signed-rank p {t['modal_p']:.4f}); project's rate nearer 0.5 on {t['toward_half']}, farther on "
          f"{t['away_from_half']} (p {t['toward_half_p']:.4f})")
    print(f"time: project {t['project_wall_s']:.1f} s wall (load, sampling, verification); "
          + (f"sampler {t['project_sampling_s']:.1f} s, {t['project_tok_s']:,.0f} tok/s; "
             if t["project_sampling_s"] else "")
          + f"stock generate {t['stock_generate_s']:.1f} s in its calls ({t['stock_tok_s_per_call']:,.0f} tok/s a call), "
          f"{t['stock_wall_s']:.1f} s wall ({t['stock_tok_s']:,.0f} tok/s)")
    done = stock["prompt_id"].nunique()
    if done < len(split):  # what the next calls need, at this run's pace
        print(f"stock: {done} of {len(split)} prompts done; the other {len(split) - done} need about "
              f"{t['stock_wall_s'] / done * (len(split) - done):.0f} s more of stock wall time at this pace")
    print(f"verdict: {'agree' if t['agree'] else 'DIFFER'} within noise (each combined test p >= {AGREE_ALPHA}); "
          f"-> {out / 'fidelity.csv'}, {out / 'totals.csv'}")


# ----------------------------------------------------------------------------- main

def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="imported base folder (boundary import-base); with --make-split also a GGUF")
    ap.add_argument("--split", help="diagnostic split parquet (--make-split writes one)")
    ap.add_argument("--config", help="workflow config (default lab/studies/2026-11-28-qwen15b-preregistration/qwen15b.yaml)")
    ap.add_argument("--prompts", type=int, default=32, help="the split's first K prompts")
    ap.add_argument("--out", help="folder of both halves' samples and the comparison (kept between calls)")
    ap.add_argument("--only", choices=["project", "stock", "compare"], help="one part (default: all three)")
    ap.add_argument("--shard", help="I/K: stock on prompts I, I+K, ... (K processes share a GPU)")
    ap.add_argument("--deadline", type=float, help="stock: seconds after the process's start past which no prompt "
                                                   "is begun")
    ap.add_argument("--max-prompts", type=int, help="stock: at most M prompts in this process")
    ap.add_argument("--rows", type=int, help="stock: rows a generate call (default n: one call a prompt)")
    ap.add_argument("--seed", type=int, help="project: the calibration seed (default the config's): a fresh "
                    "draw of the project's half against the same stock half, whose draws keep the config's seed")
    ap.add_argument("--batch-size", help="project: sampling.batch_size override (an integer or auto)")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (the tiny path)")
    ap.add_argument("--n", type=int, help="calibration.n override (the CPU path)")
    ap.add_argument("--max-new-tokens", type=int, help="sampling.max_new_tokens override (the CPU path)")
    ap.add_argument("--draws", type=int, default=DRAWS, help="draws of the combined tests' null")
    ap.add_argument("--make-split", metavar="FILE", help="write the split (first --prompts) and stop")
    ap.add_argument("--data", help="with --make-split: GSM8K's test file (its fields and answer format; "
                                   "default: the config's diagnostic split)")
    ap.add_argument("--from-run", metavar="DIR", help="with --make-split: a finished run's folder (results/RUN): "
                                                      "its diagnostic prompts of --regime, at most --prompts")
    ap.add_argument("--regime", default="Boundary", help="with --from-run: the regime (default Boundary)")
    args = ap.parse_args(argv)
    if args.make_split:
        return make_split(args)
    if not (args.split and args.out and (args.model or args.only == "compare")):
        ap.error("give --split, --out and --model (--only compare needs no model)")
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    s = resolved(args.config, args.n, args.max_new_tokens)
    split = first_prompts(args.split, args.prompts)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.only != "compare":
        import torch

        device = "cpu" if args.cpu else "cuda"
        if device == "cuda" and not torch.cuda.is_available():
            raise BoundaryError("no GPU visible: pass --cpu for the CPU path")
        check_prompts(split, s["prompt"], args.model)
        print(f"fidelity: {len(split)} prompts of {args.split}; {described(s)}; device {device}"
              + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else ""))
    if args.only in (None, "project"):
        run_project(args, s, split, out)
    if args.only is None:  # one process: free the project's model and seats for the stock one
        from boundary.sampling.models import load_model

        load_model.cache_clear()
        if not args.cpu:
            torch.cuda.empty_cache()
    if args.only in (None, "stock"):
        run_stock(args, s, split, out, device)
    if args.only in (None, "compare"):
        compare(args, s, split, out)


if __name__ == "__main__":
    try:
        main()
    except BoundaryError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
