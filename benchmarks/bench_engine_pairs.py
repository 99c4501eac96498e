"""Issue 39's two engine checks with a real model, through `boundary train` (the train rule's own
launch, one process and one GPU a run):

- pairs: one short run trained with `train.rollout_engine: generate` and again with `vllm`, the
  same settings and seed. Their actions tables must be equal (the same prompt ids at every step,
  the same anchor weights, actions and rollout sources: functions of seed, step and prompt), and
  so must the log's step, learning rate and protected fraction. Every other value both logs
  hold is computed from sampled rollouts, which the two engines draw from other random
  streams: those must agree within 3 SE (`gpu_multi_process_check.within_3se`, the rule the
  1-vs-N process checks use; its docstring says why).
- resume: a `vllm` run SIGKILLed (`--signal`) as soon as its first checkpoint is written, then
  started again with the same command. It must say "resuming from checkpoint-K" (K the first
  save step, before the last step), finish, log every step once, take the actions of an
  uninterrupted run and its learning rate at every step (the schedule went on from K, not
  from the start), pass the engine's log-prob check at every step after K (the new engine
  took the resumed weights), and its sampled values after K must agree with the uninterrupted
  run's over the same steps within 3 SE (a run restarted from the base would not).

    PYTHONPATH=workflow python benchmarks/bench_engine_pairs.py --model M --work DIR \\
        --config C [--split S] [--method pba_policy] \\
        [--steps 32] [--save-steps 8] [--devices 0,1,2] [--deadline 470] [--cpu]

Settings: the config's train section (its `grpo` entry's, with the derived keys, as the train
rule passes them) and `--method`'s keys (gpu_multi_process_check.METHODS; a mask that anchors
every third prompt in every refresh epoch), cut to --steps with a checkpoint every
--save-steps. Without --split the train split is made from the config as the workflow makes
it: its `arithmetic:` splits, then the data stage's prompts (chat template of --model).

Runs and GPUs: `generate` on the first device and `killed` (then resumed) beside it; with two
devices or more an uninterrupted `vllm` run on the second, and `killed` on the third when
there is one. With one device the pairs check compares `generate` with the resumed run (it
is a whole vllm run as well) and the resume check compares it with `generate` (actions and
learning rate do not depend on the engine). One engine a GPU: vLLM sizes its KV cache from
the device's free memory while it starts, which another engine starting beside it would skew.
--cpu: a dry run (gloo, a tiny random model and the testbed split unless --model/--split, the
stand-in engine of tests/standin_engine.py where `vllm` is asked for).

Printed: each run's end (exit, seconds), the checks (lines starting `ok` or `FAIL`), the table of
sampled values (markdown), and one `VERDICT pairs` and one `VERDICT resume` line. Written to
--tables (default --work): pairs.csv (the table) and checks.txt (every check line). Exit 1 when a
check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from gpu_multi_process_check import EXACT, METHODS, SAMPLED, within_3se
from launched import stop_launch

ROOT = Path(__file__).resolve().parents[1]
ACTION_COLUMNS = ["step", "epoch", "prompt_id", "weight", "action", "source"]
# Logged per step but not a sampled value to compare: the refresh epoch, wall time, and TRL's
# running total of tokens (it grows with the step whatever the engine).
NOT_SAMPLED = {"epoch", "step_time", "num_tokens"}
ENGINE_CHECK = "engine_logp_mean_abs_diff"
LOGP_TOLERANCE = 0.1  # training/rollout_engine.LOGP_TOLERANCE (not imported: torch-free here)
EXIT_GRACE = 30  # seconds a run may take to exit after writing its outputs; then it is stopped
HUNG = f"wrote its outputs, not exited {EXIT_GRACE} s later (stopped; its outputs are checked)"


# ---- the checks: pure functions of the runs' tables (tests/test_bench_engine_pairs.py) ----------

def actions_checks(ref: pd.DataFrame, other: pd.DataFrame) -> list[tuple[bool, str]]:
    """The same prompts at every step, then the same weights, actions and sources, row for row."""
    per_step = [g.groupby("step")["prompt_id"].apply(list) for g in (ref, other)]
    steps = sorted(set(per_step[0].index) | set(per_step[1].index))
    differ = [s for s in steps if per_step[0].get(s) != per_step[1].get(s)]
    sizes = sorted({len(v) for v in per_step[0]})
    out = [(not differ, f"prompt ids per step: {len(steps) - len(differ)} of {len(steps)} steps equal "
                        f"({'/'.join(map(str, sizes))} prompts a step)"
            + (f"; first differing step {differ[0]}" if differ else ""))]
    cols = [c for c in ACTION_COLUMNS if c in ref or c in other]
    a, b = (t.reindex(columns=cols).sort_values(["step", "prompt_id"]).reset_index(drop=True) for t in (ref, other))
    same = a.shape == b.shape and a.equals(b)
    out.append((same, f"{', '.join(c for c in cols if c not in ('step', 'prompt_id'))}: "
                      + (f"equal ({len(a)} rows)" if same else f"differ ({len(a)} vs {len(b)} rows)")))
    return out


def exact_checks(ref: pd.DataFrame, other: pd.DataFrame, steps=None) -> list[tuple[bool, str]]:
    """Log columns that no sampled value enters (EXACT), equal at every step (or at `steps`)."""
    out = []
    for c in EXACT:
        if c not in ref or c not in other:
            if c in ref or c in other:
                out.append((False, f"{c}: logged by one run only"))
            continue
        if not (ref["step"].is_unique and other["step"].is_unique):
            out.append((False, f"{c}: not compared, a step is logged twice"))
            continue
        x, y = (t.set_index("step", drop=False)[c] for t in (ref, other))
        if steps is not None:
            x, y = x.reindex(steps), y.reindex(steps)
        same = x.index.equals(y.index) and np.array_equal(x.to_numpy(float), y.to_numpy(float), equal_nan=True)
        out.append((same, f"{c}: {'equal' if same else 'differs'} at {len(y)} steps"))
    return out


def sampled_columns(ref: pd.DataFrame, other: pd.DataFrame) -> list[str]:
    """The values both runs log that come from sampled rollouts: every numeric column of both,
    but the exact ones, NOT_SAMPLED and those one run never filled."""
    return [c for c in ref.columns if c in other.columns and c not in EXACT and c not in NOT_SAMPLED
            and pd.api.types.is_numeric_dtype(ref[c]) and pd.api.types.is_numeric_dtype(other[c])
            and ref[c].notna().any() and other[c].notna().any()]


def sampled_table(ref: pd.DataFrame, other: pd.DataFrame, names: tuple[str, str]) -> pd.DataFrame:
    """One row a sampled column: each run's mean over steps, the difference, its SE, |diff| / SE
    and the verdict of the 3-SE rule; `primary`: one of the values the rule was set for
    (gpu_multi_process_check.SAMPLED), which alone decide the check."""
    rows = []
    for c in sampled_columns(ref, other):
        r = within_3se(ref[c], other[c])
        z = abs(r["difference"]) / r["se"] if r["se"] > 0 else (0.0 if r["difference"] == 0 else float("inf"))
        floor = r["ok"] and r["tolerance"] > 3 * r["se"]
        rows.append({"metric": c, f"mean {names[0]}": r["mean_1"], f"mean {names[1]}": r["mean_2"],
                     "difference": r["difference"], "SE": r["se"], "|diff|/SE": z, "steps": r["steps"][1],
                     "primary": c in SAMPLED,
                     "verdict": ("ok (floor 1e-3)" if floor else "ok") if r["ok"] else "beyond 3 SE"})
    return pd.DataFrame(rows, columns=["metric", f"mean {names[0]}", f"mean {names[1]}", "difference", "SE",
                                       "|diff|/SE", "steps", "primary", "verdict"])


def rule_checks(table: pd.DataFrame, prefix: str = "") -> list[tuple[bool | None, str]]:
    """A check line a row: a primary value beyond 3 SE fails; any other is a note (with some 30
    values logged, one beyond 3 SE by chance alone is to be expected now and then)."""
    out = []
    for row in table.itertuples(index=False):
        ok = row.verdict != "beyond 3 SE"
        text = (f"{prefix}{row.metric}: within 3 SE" if ok else
                f"{prefix}{row.metric}: |diff| {abs(row.difference):.3g} > 3 SE {3 * row.SE:.3g}")
        out.append((ok if row.primary else (True if ok else None), text + ("" if row.primary else " (secondary)")))
    missing = [c for c in SAMPLED if c not in set(table["metric"])]
    if table.empty or not table["primary"].any():
        out.append((False, f"{prefix}none of the primary values ({', '.join(SAMPLED)}) logged by both runs"))
    elif missing:
        out.append((None, f"{prefix}not logged by both runs: {', '.join(missing)}"))
    return out


MARK = {True: "ok  ", False: "FAIL", None: "note"}


def passed(checks) -> bool:
    """No check failed (a note is not a failure)."""
    return all(ok is not False for ok, _ in checks)


def show(checks):
    """The check lines, but those of sampled values within 3 SE (the table shows them): counted."""
    quiet = [text for ok, text in checks if ok is True and "within 3 SE" in text]
    lines = [f"  {MARK[ok]} {text}" for ok, text in checks if not (ok is True and "within 3 SE" in text)]
    if quiet:
        lines.append(f"  ok   {len(quiet)} sampled values within 3 SE (table above; checks.txt has each line)")
    print("\n".join(lines), flush=True)


def markdown(table: pd.DataFrame) -> str:
    def cell(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def pairs_checks(ref_log, ref_actions, log, actions, names=("generate", "vllm")):
    """The pairs check of two finished runs: (checks, table of sampled values)."""
    checks = actions_checks(ref_actions, actions) + exact_checks(ref_log, log)
    table = sampled_table(ref_log, log, names)
    return checks + rule_checks(table), table


def resume_checks(said: str | None, first_save: int, steps: int, log: pd.DataFrame, actions: pd.DataFrame,
                  ref_log: pd.DataFrame, ref_actions: pd.DataFrame, engine: bool = True):
    """The resume check of a run killed after checkpoint-`first_save` and restarted: `said` is the
    restart's "resuming from ..." line (None: it did not say one); `ref_*` an uninterrupted run
    of the same settings and seed (any engine: actions and the schedule do not depend on it)."""
    checks = []
    resumed = said is not None and f"checkpoint-{first_save};" in said
    checks.append((resumed, f"restart said: {said.strip()}" if said else "restart did not resume (no 'resuming from')"))
    logged = log["step"].astype(int).tolist()
    checks.append((logged == list(range(1, steps + 1)),
                   f"log steps {logged[:1]}..{logged[-1:]}: " + ("each of 1.." + str(steps) + " once"
                                                                 if logged == list(range(1, steps + 1))
                                                                 else "not each step once")))
    checks += actions_checks(ref_actions, actions)
    log = log.drop_duplicates("step", keep="last")  # said above; the last of each step is checked on
    after = list(range(first_save + 1, steps + 1))
    checks += [(ok, f"after the resume, {text}") for ok, text in exact_checks(ref_log, log, after)]
    if engine:
        got = log.set_index("step")[ENGINE_CHECK].reindex(after) if ENGINE_CHECK in log else pd.Series(dtype=float)
        good = len(got) == len(after) and bool(np.isfinite(got).all()) and bool((got <= LOGP_TOLERANCE).all())
        checks.append((good, f"engine log-prob check at the {len(after)} steps after the resume: "
                             + (f"largest mean |diff| {got.max():.3g} <= {LOGP_TOLERANCE}" if good else
                                f"missing or above {LOGP_TOLERANCE}: {got.round(4).tolist()}")))
    tail = lambda t: t[t["step"].isin(after)]  # noqa: E731
    table = sampled_table(tail(ref_log), tail(log), ("uninterrupted", "resumed"))
    return checks + rule_checks(table, "after the resume, "), table


# ---- the runs ---------------------------------------------------------------------------------

def settings_for(config: dict, a, engine: str) -> dict:
    from boundary.core import settings as stage_settings

    s = {**stage_settings.train_key(config, a.config_method), **METHODS[a.method],
         "steps": a.steps, "save_steps": a.save_steps, "checkpoints": [], "gpus": 0 if a.cpu else 1}
    for key, value in (("prompts_per_step", a.prompts), ("num_generations", a.G),
                       ("max_completion_length", a.completion_len), ("lr", a.lr)):
        if value is not None:
            s[key] = value
    if engine == "vllm":
        s.update(rollout_engine="vllm", vllm_check_every=1, vllm_gpu_memory_utilization=a.vllm_mem)
    return s


def tiny_inputs(work: Path) -> tuple[Path, Path]:
    """--cpu without --model: a tiny random testbed model and the testbed's train split."""
    from boundary.core.artifacts import write_table
    from boundary.tasks.testbed import TestbedTask, TinyModelConfig, build_model, build_tokenizer, make_prompts

    model = work / "tiny_model"
    tok = build_tokenizer()
    build_model(TinyModelConfig(hidden=32, layers=1, heads=2, intermediate=64), tok).save_pretrained(model)
    tok.save_pretrained(model)
    split = work / "splits" / "train.parquet"
    write_table(make_prompts(TestbedTask(), {"train": 64})["train"], split)
    return model, split


def config_split(config: dict, model: str, work: Path) -> Path:
    """The config's train split as the workflow makes it: `boundary arithmetic`'s files (every
    split of the section: they are drawn from one stream), then the data stage's rows."""
    from boundary.core import settings as stage_settings
    from boundary.core.artifacts import write_table
    from boundary.stages.data import build_splits
    from boundary.tasks import arithmetic

    spec = stage_settings.data_key(config, "train")
    if config.get("arithmetic"):
        ar = config["arithmetic"]
        arithmetic.main(["--out", str(work / "arithmetic"), "--seed", str(ar["seed"]),
                         "--levels", arithmetic.levels_text(ar["levels"]),
                         *(["--max-answer-share", str(ar["max_answer_share"])] if ar["max_answer_share"] else []),
                         *[f"--split={k}={v}" for k, v in ar["splits"].items()]])
        path = spec["data"]["train"]["path"]
        spec["data"]["train"] = {**spec["data"]["train"], "path": str(work / "arithmetic" / Path(path).name)}
    out = work / "splits" / "train.parquet"
    write_table(build_splits(spec, model)["train"], out)
    return out


def write_mask(split: Path, settings: dict, out: Path) -> None:
    """Every third prompt anchored in every refresh epoch (gpu_multi_process_check's mask)."""
    from boundary.core import settings as stage_settings

    ids = pd.read_parquet(split, columns=["prompt_id"])["prompt_id"]
    epochs = stage_settings.refresh_epochs(settings["steps"], settings["refresh_steps"])
    pd.DataFrame([{"prompt_id": p, "epoch": e, "weight": float(i % 3 == 0), "action": "anchor" if i % 3 == 0
                   else "sharpen"} for i, p in enumerate(ids) for e in range(epochs)]).to_parquet(out)


def layout(devices: list[str], cpu: bool) -> dict[str, str | None]:
    """Run name -> the device it trains on (None: the CPU)."""
    if cpu:
        return {"generate": None, "vllm": None, "killed": None}
    if not devices:
        sys.exit("bench_engine_pairs: no GPU visible (--cpu for a dry run)")
    runs = {"generate": devices[0], "killed": devices[0]}
    if len(devices) > 1:
        runs.update(vllm=devices[1], killed=devices[2] if len(devices) > 2 else devices[0])
    return runs


class Run:
    """One `boundary train` launch of a run, in a process group of its own, its output in a log."""

    def __init__(self, name: str, a, work: Path, model: str, split: Path, settings: dict, device, mask):
        self.name, self.work, self.started, self.ended, self.code = name, work, None, None, None
        self.out, self.ck = work / name, work / f"ck_{name}"
        self.cmd = [sys.executable, "-m", "boundary.cli", "train", "--model", model, "--train-split", str(split),
                    "--settings", json.dumps(settings), "--seed", str(a.seed), "--out", str(self.out),
                    "--checkpoint-dir", str(self.ck), *(["--mask", str(mask)] if mask else [])]
        paths = [str(ROOT / "workflow"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        standin = a.cpu and settings.get("rollout_engine") == "vllm"
        if standin:  # where TRL builds vLLM's engine, the stand-in (tests/standin_site/sitecustomize.py)
            paths = [str(ROOT / "tests" / "standin_site"), str(ROOT / "tests"), *paths]
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "BOUNDARY_STANDIN_ENGINE": "1" if standin else "",
                    "OMP_NUM_THREADS": "1" if a.cpu else os.environ.get("OMP_NUM_THREADS", "4")}
        if device is not None:
            self.env["CUDA_VISIBLE_DEVICES"] = device
        self.job = None

    @classmethod
    def finished_in(cls, work: Path, name: str) -> Run:
        """A run trained earlier into `work` (--check-only), as the checks read it."""
        run = cls.__new__(cls)
        run.name, run.out, run.log = name, work / name, work / "logs" / f"{name}{'_resumed' if name == 'killed' else ''}.log"
        run.code = 0 if (run.out / "log.parquet").exists() else "no log.parquet"
        return run

    def start(self, leg: str = "") -> None:
        self.log = self.work / "logs" / f"{self.name}{leg}.log"
        self.started, self.ended, self.code = time.time(), None, None
        self.job = subprocess.Popen(self.cmd, env=self.env, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def poll(self):
        if self.job is not None and self.code is None and self.job.poll() is not None:
            self.code, self.ended = self.job.returncode, time.time()
        return self.code

    def checkpoint(self, step: int) -> bool:
        return bool(list(self.ck.glob(f"*/checkpoint-{step}/trainer_state.json")))

    def finished(self) -> bool:
        """Exited 0, or hung after its outputs (stopped then: see train_all), with them written."""
        return (self.code == 0 or self.code == HUNG) and (self.out / "log.parquet").exists()


def train_all(runs: dict[str, Run], a, t0: float) -> dict:
    """Every run at once; the `killed` one killed after its first checkpoint and started again.
    Returns what the resume check needs to know of the kill."""
    kill = {"at_step": None, "signal": a.signal, "before_kill_finished": False}
    for run in runs.values():
        run.start("_first" if run.name == "killed" else "")
    killed = runs["killed"]
    deadline = t0 + a.deadline
    while True:
        now = time.time()
        if kill["at_step"] is None and killed.job is not None:
            if killed.checkpoint(a.save_steps) or killed.poll() is not None:
                kill["before_kill_finished"] = killed.poll() is not None
                if killed.poll() is None:
                    os.killpg(killed.job.pid, getattr(signal, f"SIG{a.signal}"))
                    killed.job.wait()
                    killed.poll()
                kill["at_step"] = a.save_steps
                print(f"killed: SIG{a.signal} after checkpoint-{a.save_steps} at {now - t0:.0f} s (exit "
                      f"{killed.code}, {killed.ended - killed.started:.0f} s after its start); restarting",
                      flush=True)
                kill["first_exit"] = killed.code
                killed.start("_resumed")
        running = [r for r in runs.values() if r.job is not None and r.poll() is None]
        for run in running:  # log.parquet is written last, atomically: a run that outlives it hangs
            if (run.out / "log.parquet").exists() and (run.name != "killed" or kill["at_step"] is not None):
                run.wrote = getattr(run, "wrote", None) or now
                if now - run.wrote > EXIT_GRACE:
                    stop_launch(run.job)
                    run.poll()
                    run.code = HUNG
        running = [r for r in running if r.code is None]
        for run in runs.values():
            if run.ended is not None and not getattr(run, "reported", False) and (run.name != "killed" or
                                                                                  kill["at_step"] is not None):
                run.reported = True
                print(f"{'done' if run.code == 0 else 'hung' if run.code == HUNG else 'FAIL'} {run.name}: exit {run.code}, "
                      f"{run.ended - run.started:.0f} s, at {run.ended - t0:.0f} s; log {run.log}", flush=True)
        if not running:
            break
        if now > deadline:
            for run in running:
                stop_launch(run.job)
                run.poll()
                run.code = f"stopped at the {a.deadline:.0f} s deadline"
                print(f"FAIL {run.name}: {run.code}; log {run.log}", flush=True)
                run.reported = True
            break
        time.sleep(0.2)
    return kill


def read_run(run: Run):
    return pd.read_parquet(run.out / "log.parquet"), pd.read_parquet(run.out / "actions.parquet")


def report(runs: dict[str, Run], kill: dict, a) -> list[tuple[bool, str]]:
    """Print and return every check; the table(s) to --tables."""
    tables = Path(a.tables or a.work)
    tables.mkdir(parents=True, exist_ok=True)
    all_checks, frames = [], []
    ref = runs["generate"]
    # the pairs check: the uninterrupted vllm run when there is one, and the resumed run
    others = [r for r in (runs.get("vllm"), runs["killed"]) if r is not None]
    verdict = {}
    for run in others:
        title = f"pairs: {run.name} (rollout_engine vllm) against generate"
        print(f"== {title}", flush=True)
        if not (ref.finished() and run.finished()):
            checks = [(False, f"not compared: {', '.join(r.name for r in (ref, run) if not r.finished())} "
                              "did not finish")]
        else:
            checks, table = pairs_checks(*read_run(ref), *read_run(run),
                                         names=("generate", "vllm" if run.name == "vllm" else "vllm resumed"))
            print(markdown(table), flush=True)
            frames.append(table.assign(check=title))
            log = read_run(run)[0]
            engine_only = [c for c in log.columns if c.startswith(("engine_", "sampling_"))]
            if engine_only:
                print("engine only (mean over steps): " + ", ".join(f"{c} {log[c].mean():.4g}" for c in engine_only))
        show(checks)
        verdict[run.name] = passed(checks)
        all_checks += [(ok, f"[{title}] {text}") for ok, text in checks]
    pairs_run = "vllm" if "vllm" in runs else "killed"
    print(f"VERDICT pairs ({pairs_run} against generate): {'PASS' if verdict.get(pairs_run) else 'FAIL'}", flush=True)

    killed, base = runs["killed"], runs.get("vllm") or runs["generate"]
    title = f"resume: killed after checkpoint-{a.save_steps}, restarted, against {base.name}"
    print(f"== {title}", flush=True)
    said = None
    if killed.log.exists():
        said = next((line for line in killed.log.read_text().splitlines() if "resuming from" in line), None)
    if kill.get("before_kill_finished"):
        checks = [(False, "the first run finished (or failed) before its first checkpoint was seen: nothing was "
                          f"killed mid-run (exit {kill.get('first_exit')})")]
    elif not (killed.finished() and base.finished()):
        checks = [(False, f"not compared: {', '.join(r.name for r in (killed, base) if not r.finished())} "
                          "did not finish")]
    else:
        checks, table = resume_checks(said, a.save_steps, a.steps, *read_run(killed), *read_run(base))
        print(markdown(table), flush=True)
        frames.append(table.assign(check=title))
    show(checks)
    all_checks += [(ok, f"[{title}] {text}") for ok, text in checks]
    print(f"VERDICT resume: {'PASS' if passed(checks) else 'FAIL'}", flush=True)
    if frames:
        pd.concat(frames, ignore_index=True).to_csv(tables / "pairs.csv", index=False)
    (tables / "checks.txt").write_text("".join(f"{MARK[ok]} {t}\n" for ok, t in all_checks))
    return all_checks


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a model folder (boundary import-base); with --cpu: default a tiny one")
    p.add_argument("--split", help="a train split parquet (default: made from --config)")
    p.add_argument("--config", required=True, help="a workflow config: its train settings (and its train split, "
                   "without --split), e.g. one with an arithmetic: section, which needs no data files")
    p.add_argument("--config-method", default="grpo", help="the config's method whose settings are the base")
    p.add_argument("--method", choices=sorted(METHODS), default="pba_policy", help="the keys trained on top")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--save-steps", type=int, default=8, help="the checkpoint period; the kill follows the first")
    p.add_argument("--prompts", type=int, help="prompts_per_step (default: the config's)")
    p.add_argument("--G", type=int, help="num_generations (default: the config's)")
    p.add_argument("--completion-len", type=int, help="max_completion_length (default: the config's)")
    p.add_argument("--lr", type=float, help="default: the config's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vllm-mem", type=float, default=0.2, help="vllm_gpu_memory_utilization (a trainer beside it)")
    p.add_argument("--signal", choices=("KILL", "TERM"), default="KILL", help="what stops the first run")
    p.add_argument("--devices", help="GPUs to use, e.g. 0,1 (default: every visible one)")
    p.add_argument("--deadline", type=float, default=470, help="seconds for all runs; then they are stopped")
    p.add_argument("--work", required=True, help="a new folder (an old one's checkpoints would be resumed)")
    p.add_argument("--tables", help="where pairs.csv and checks.txt go (default --work)")
    p.add_argument("--cpu", action="store_true", help="a dry run on the CPU (stand-in engine)")
    p.add_argument("--check-only", action="store_true",
                   help="train nothing: check the runs already in --work (a device's logs.tgz unpacked; "
                        "its bench.json gives --steps and --save-steps)")
    a = p.parse_args()
    t0 = time.time()
    from boundary.core.config import load_config
    from boundary.core.gpus import visible

    a.work = Path(a.work)
    if a.check_only:  # the run's own steps, checkpoint period and kill, as it wrote them
        done = json.loads((a.work / "bench.json").read_text()) if (a.work / "bench.json").exists() else {}
        a.steps, a.save_steps = done.get("steps", a.steps), done.get("save_steps", a.save_steps)
        runs = {name: Run.finished_in(a.work, name) for name in ("generate", "vllm", "killed")
                if name != "vllm" or (a.work / name).exists()}
        sys.exit(0 if passed(report(runs, done.get("kill", {}), a)) else 1)
    if list(a.work.glob("ck_*")):
        sys.exit(f"bench_engine_pairs: {a.work} holds checkpoints of an earlier run; give a new --work")
    (a.work / "logs").mkdir(parents=True, exist_ok=True)
    if a.save_steps >= a.steps:
        sys.exit("bench_engine_pairs: --save-steps must be below --steps (the kill follows the first checkpoint)")
    config = load_config(a.config)
    model, split = a.model, a.split
    if a.cpu and not model:
        model, split = tiny_inputs(a.work)
    split = Path(split) if split else config_split(config, model, a.work)
    devices = [d for d in (a.devices.split(",") if a.devices else visible())] if not a.cpu else []
    runs_on = layout(devices, a.cpu)
    mask = a.work / "mask.parquet" if METHODS[a.method].get("mask") else None
    settings = {engine: settings_for(config, a, engine) for engine in ("generate", "vllm")}
    if a.cpu:  # the testbed's answers are digit strings; a CPU step at the config's length is slow
        for s in settings.values():
            s.update(prompts_per_step=a.prompts or 4, num_generations=a.G or 2,
                     max_completion_length=a.completion_len or 6)
    if mask:
        write_mask(split, settings["generate"], mask)
    print(f"bench_engine_pairs: {a.steps} steps of {settings['generate']['prompts_per_step']} prompts x "
          f"{settings['generate']['num_generations']}, method {a.method}, checkpoint every {a.save_steps}; "
          f"runs on {', '.join(k + ' ' + (v or 'cpu') for k, v in runs_on.items())}; settings (vllm) "
          f"{json.dumps(settings['vllm'], sort_keys=True)}", flush=True)
    runs = {name: Run(name, a, a.work, str(model), split, settings["generate" if name == "generate" else "vllm"], device, mask)
            for name, device in runs_on.items()}
    kill = train_all(runs, a, t0)
    (a.work / "bench.json").write_text(json.dumps({"steps": a.steps, "save_steps": a.save_steps, "kill": kill,
                                                   "devices": runs_on, "settings": settings}, indent=1))
    print(f"all runs done ({time.time() - t0:.0f} s)", flush=True)
    checks = report(runs, kill, a)
    sys.exit(0 if passed(checks) else 1)


if __name__ == "__main__":
    main()
