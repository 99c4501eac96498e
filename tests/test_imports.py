"""What a `boundary` process imports: each stage pays for its imports before any work (torch and
transformers about 8 CPU-seconds, TRL or vLLM seconds more), and a workflow starts one process a
job. The stages that need no model never import the model stack; evaluation with the hf sampler
never imports the trainer's (TRL, vLLM, peft, datasets). A guarantee, checked in one fresh
interpreter that records every import as it happens; timings are benchmarks/bench_stage_starts.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import yaml
from conftest import ROOT, pythonpath
from test_base_rollouts import stage_argv
from test_train import alternate

from boundary.core import settings
from boundary.core.config import validate_config
from boundary.stages.evaluate import counts_from_samples
from boundary.tasks.testbed import TestbedTask, make_prompts

MODEL_STACK = ("torch", "transformers", "trl", "vllm", "peft", "accelerate", "datasets")
TRAINER_STACK = ("trl", "vllm", "peft", "datasets")

# Runs the commands as a rule does (boundary.cli.main), recording the stack of the first import
# of each package above; prints what each step imported of them.
PROBE = textwrap.dedent("""
    import json, sys, traceback
    FIRST = {}

    def hook(event, args):
        if event == "import" and args[0] in %(watched)r and args[0] not in FIRST:
            FIRST[args[0]] = "".join(f for f in traceback.format_stack()[:-1] if "<frozen" not in f)

    sys.addaudithook(hook)
    from boundary.cli import main, parsers

    if __name__ == "__main__":
        steps = json.load(open(sys.argv[1]))
        for name, commands in steps:
            for argv in commands:
                assert main(argv) == 0, argv
            if name == "light":
                for command, _ in parsers():  # every command's options, and its --help
                    try:
                        main([command, "--help"])
                    except SystemExit:
                        pass
            print("IMPORTED", name, json.dumps({m: FIRST[m] for m in sorted(FIRST)}), flush=True)
            print("MODULES", name, json.dumps(sorted(m for m in sys.modules if m in %(modules)r
                                                     or m.split(".")[0] in %(modules)r)), flush=True)
""")
# Modules a step must not import, printed after each step (a submodule or a package): TRL's
# GRPOTrainer imports vLLM where it is installed, and a sampling stage that imported it drew other
# bf16 logits on a GPU where vLLM had been installed (an H100), and paid vLLM's import.
WATCHED_MODULES = ("trl.trainer.grpo_trainer", "vllm")


def run_probe(tmp_path, steps) -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
    """Each step's first imports of the model stack (with their stacks), and the WATCHED_MODULES
    loaded after it."""
    (tmp_path / "probe.py").write_text(PROBE % {"watched": MODEL_STACK, "modules": WATCHED_MODULES})
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    run = subprocess.run([sys.executable, str(tmp_path / "probe.py"), str(tmp_path / "steps.json")], cwd=tmp_path,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": pythonpath()}, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    found, loaded = {}, {}
    for line in run.stdout.splitlines():
        if line.startswith(("IMPORTED ", "MODULES ")):
            kind, name, what = line.split(" ", 2)
            (found if kind == "IMPORTED" else loaded)[name] = json.loads(what)
    return found, loaded


def light_inputs(tmp_path) -> list[list[str]]:
    """The smoke config's data, regimes, masks and report commands, with their rules' settings,
    on small inputs of the columns each reads."""
    config = validate_config(yaml.safe_load((ROOT / "tests" / "configs" / "smoke.yaml").read_text()))
    run = tmp_path / "run"
    rng = np.random.default_rng(0)
    (run / "rollouts").mkdir(parents=True)
    data = ["data", "--settings", settings.text(settings.data_key(config)), "--out", str(run / "splits")]
    # The calibration and gate draws of the diagnostic and train splits the data command writes.
    diagnostic = [f"d{i}" for i in range(48)]
    train = [f"t{i}" for i in range(64)]
    pd.DataFrame([(p, j, bool(rng.random() < w), True) for p, w in zip(diagnostic, rng.beta(0.5, 1, 48))
                  for j in range(64)], columns=["prompt_id", "sample_idx", "correct", "verified"]).to_parquet(
        run / "rollouts" / "base_calibration.parquet")
    mask = settings.mask_key(config, "pba")
    pd.DataFrame([(p, e, j, bool(rng.random() < 0.3)) for p in train for e in range(mask["epochs"])
                  for j in range(mask["G0"])], columns=["prompt_id", "epoch", "draw_idx", "correct"]).to_parquet(
        run / "rollouts" / "base_gate.parquet")
    split = run / "train_ids.parquet"
    pd.DataFrame({"prompt_id": train}).to_parquet(split)
    regimes = ["regimes", "--calibration", str(run / "rollouts" / "base_calibration.parquet"),
               "--settings", settings.text(settings.regimes_key(config)), "--out", str(run / "regimes" / "regimes.parquet")]
    masks = ["masks", "--kind", "gate", "--gate-draws", str(run / "rollouts" / "base_gate.parquet"),
             "--train-split", str(split), "--settings", settings.text(mask), "--out", str(run / "masks" / "pba.parquet")]
    # The base's counts on the diagnostic split: what a report reads at the least.
    (run / "eval" / "diagnostic" / "base" / "seed0").mkdir(parents=True)
    samples = pd.read_parquet(run / "rollouts" / "base_calibration.parquet").assign(answer="1", entropy=0.5)
    counts_from_samples(samples.loc[samples["sample_idx"] < 32], [1, 4, 16, 32]).to_parquet(
        run / "eval" / "diagnostic" / "base" / "seed0" / "counts.parquet")
    few = {**settings.report_key(config), "bootstrap": {"resamples": 100, "seed": 0}}  # its imports, not its intervals
    report = ["report", "--results", str(run), "--settings", settings.text(few),
              "--out", str(tmp_path / "report")]
    return [data, regimes, masks, report]


def evaluate_inputs(tmp_path, model) -> list[str]:
    split = tmp_path / "split.parquet"
    pd.DataFrame({"prompt_id": ["p0", "p1"], "prompt": ["12+34=", "56+78="], "answer": ["1234", "5678"]}).to_parquet(split)
    stage = {"evaluate": {"n": 4, "temperature": 1.0, "top_p": 1.0, "seed": 3, "ks": [1, 4]},
             "sampling": {"backend": "hf", "batch_size": 16, "max_new_tokens": 4},
             "verify": {"extractor": "last_number", "timeout": 5, "workers": 1}}
    return ["evaluate", "--model", str(model), "--split", str(split), "--settings", settings.text(stage),
            "--samples", str(tmp_path / "samples.parquet"), "--counts", str(tmp_path / "counts.parquet")]


def base_rollouts_inputs(tmp_path, model) -> list[str]:
    """The base_rollouts stage on a support anchor's mask (odd rows anchored), as its own tests run it."""
    root = tmp_path / "base_rollouts"
    root.mkdir()
    split = make_prompts(TestbedTask(), {"train": 16})["train"]
    split.to_parquet(root / "train.parquet")
    w = alternate(split)
    pd.DataFrame([{"prompt_id": p, "epoch": e, "weight": w[e, i], "action": "anchor" if w[e, i] else "sharpen"}
                  for i, p in enumerate(split["prompt_id"]) for e in range(w.shape[0])]
                 ).to_parquet(root / "mask.parquet")
    return ["base-rollouts", *stage_argv(model, root, root / "drawn.parquet")]


def test_stages_import_only_the_stack_they_use(tmp_path, tiny_model_dir):
    """data (the testbed's), regimes, masks and report, then every command's parser and
    `--help`: not one module of the model stack; then evaluation with the hf sampler: torch and transformers, but
    none of the trainer's packages; then the base_rollouts stage (TRL's trainer config, for the trainer's own
    schedule): not TRL's GRPOTrainer, so not vLLM. A failure shows the stack of the import that broke it."""
    found, loaded = run_probe(tmp_path, [["light", light_inputs(tmp_path)],
                                         ["evaluate", [evaluate_inputs(tmp_path, tiny_model_dir)]],
                                         ["base-rollouts", [base_rollouts_inputs(tmp_path, tiny_model_dir)]]])
    assert loaded["base-rollouts"] == [], loaded  # nor before it: the steps run one after another
    assert len(pd.read_parquet(tmp_path / "base_rollouts" / "drawn.parquet"))
    assert found["light"] == {}, "\n".join(f"{m} imported at:\n{stack}" for m, stack in found["light"].items())
    trainer = {m: stack for m, stack in found["evaluate"].items() if m in TRAINER_STACK}
    assert trainer == {}, "\n".join(f"{m} imported at:\n{stack}" for m, stack in trainer.items())
    assert {"torch", "transformers"} <= set(found["evaluate"])  # the probe sees what a stage imports
    assert (tmp_path / "counts.parquet").exists() and (tmp_path / "report" / "report.html").exists()


def test_the_import_graph_walks_every_statement_that_can_hold_an_import():
    """core/sources.py reads imports from statements only (an import is never an expression):
    nested in functions, classes, branches, loops, with, try (handlers, else, finally) and match,
    each is found, and so is every import of every package module."""
    import ast

    from boundary.core import sources

    code = textwrap.dedent("""
        import a
        def f():
            import b
            class C:
                import c
            if x:
                import d
            else:
                import e
            for i in y:
                import f
            while z:
                import g
            with w:
                import h
            try:
                import i
            except E:
                import j
            else:
                import k
            finally:
                import l
            match v:
                case 1:
                    import m
            async def g():
                async with u:
                    import n
        lambda: __import__("not_a_statement")
    """)
    def imports(nodes):
        return sorted((n.lineno, n.col_offset) for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom)))

    tree = ast.parse(code)
    assert len(imports(sources._statements(tree))) == 14 and imports(sources._statements(tree)) == imports(ast.walk(tree))
    for path in sources.PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        assert imports(sources._statements(tree)) == imports(ast.walk(tree)), path
