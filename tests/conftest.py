"""Shared fixtures: a tiny random testbed model on disk and the CLI on PATH."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# test.sh runs one xdist worker a core: a second torch/BLAS thread in a worker only spins
# against the other worker (a tiny model's step ran 10-17x slower so). Set before torch and
# numpy load; a Snakemake job still gets its rule's threads (OMP_NUM_THREADS={threads}).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# The `boundary` CLI lives beside this interpreter; subprocesses must find it.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
# TRL takes vLLM as absent in the test processes, as in `boundary train` without the vLLM engine
# (the stand-in engine's runs too): TRL 1.16.0 imports vLLM wherever it is installed, ~10 s of
# CPU a worker that imports the trainer (every worker: collection imports test_train). The tests
# of vLLM itself import it directly.
from boundary.training import trl_pin  # noqa: E402

trl_pin.without_vllm()
# The environment as the session begins: the test pipelines' jobs get it (test_workflow.snakemake),
# whatever in-process libraries set later (vLLM sets torch's variables and its own at import).
START_ENV = dict(os.environ)

# The files whose tests run whole pipelines or several processes, longest first (tests/README.md
# says what each runs; test_qwen15b's and test_lease's are the project's own study tests, which load
# this file too).
# They are collected first and test.sh keeps that order (--dist loadfile --no-loadscope-reorder),
# so the two workers end together: xdist's own order (most tests first) left the longest file for
# last, about 90 s of one worker alone. A file is one worker's: runs that must go side by side
# sit in separate files (test_workflow / test_workflow_plans, test_distributed / test_fsdp).
# The SLURM run is second, beside the real model's: its worker mostly waits on the plugin's status
# checks, and the real model's pipeline (--cores 2) takes the idle core meanwhile.
LONGEST_FIRST = ["test_real_model.py", "test_slurm.py", "test_workflow.py", "test_distributed.py", "test_qwen15b.py",
                 "test_lora.py", "test_workflow_plans.py", "test_fsdp.py", "test_rollout_engine.py", "test_sampling.py",
                 "test_train.py", "test_lease.py"]


def pythonpath(*first) -> str:
    """PYTHONPATH for a subprocess of a test: `first`, this tree's package, then this process's own
    PYTHONPATH (packages installed into a folder on it, not into the interpreter, stay importable)."""
    paths = [*map(str, first), str(ROOT / "workflow"), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    return os.pathsep.join(dict.fromkeys(p for p in paths if p))


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's order kept


_FROZEN_AT = [None]  # the test file whose first test froze last


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """As each test file begins, move what is alive (every test module collection imported and
    what it imports: torch, transformers, TRL, pandas...; what earlier files imported since)
    out of the cyclic garbage collector's reach. transformers, accelerate, TRL and vLLM call
    gc.collect() in their own code (a trainer's start and end, an engine's start), and a full
    collection walks every tracked object: in a test process holding all of those modules, a
    fifth to two fifths of the trainer files' CPU time (test_rollout_engine.py: 14 of 36
    CPU-seconds). Frozen objects are still freed when their last reference goes; only a cycle
    among them would stay, and these live for the session anyway (the previous file's module
    fixtures are torn down by now). Again each file: an in-process vLLM engine's shutdown calls
    gc.unfreeze()."""
    if item.path != _FROZEN_AT[0]:
        _FROZEN_AT[0] = item.path
        gc.collect()
        gc.freeze()


def pytest_unconfigure(config):
    gc.unfreeze()  # the interpreter's own teardown collects everything, as without the freeze


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A randomly initialised tiny Llama + char tokenizer, saved like a pretrained base."""
    from boundary.tasks.testbed import TinyModelConfig, build_model, build_tokenizer

    out = tmp_path_factory.mktemp("tiny_model")
    tokenizer = build_tokenizer()
    model = build_model(TinyModelConfig(hidden=32, layers=1, heads=2, intermediate=64), tokenizer)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture
def boundary_cli(capsys):
    """`boundary ARGV` in this process (the command's entry point, boundary.cli.main), for tests
    of what a command writes and says, not of a process start (torch and transformers again, ~5 s):
    call(argv, check=False) -> (exit code, stdout, stderr)."""
    from boundary.cli import main

    def call(argv, check=False):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as stop:  # a bad option: the parser's one line, exit 2
            code = stop.code
        out = capsys.readouterr()
        assert code == 0 or not check, out.err
        return code, out.out, out.err

    return call


@contextlib.contextmanager
def one_thread():
    """torch on one thread in this process, as a test's `OMP_NUM_THREADS=1` subprocesses run: a
    run made here then computes as theirs do (MKL promises equal bits only at equal shapes,
    alignment and thread count), where a test compares it with theirs."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def stage_here():
    """A stage's own code run in this process (where the check is not about a process: torch and
    transformers are imported already, a process would start them again, 8-12 CPU-seconds), on
    one thread as a test's subprocess runs (`one_thread`), leaving nothing behind for the next
    test: the environment (the training arguments and accelerate export settings into it), the
    working directory, the global random streams the trainer seeds, and accelerate's singletons."""
    import random

    import numpy as np
    import torch

    environ, cwd = dict(os.environ), os.getcwd()
    streams = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        with one_thread():
            yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        random.setstate(streams[0])
        np.random.set_state(streams[1])
        torch.set_rng_state(streams[2])
        if "accelerate.state" in sys.modules:
            from accelerate.state import AcceleratorState, GradientState

            AcceleratorState._reset_state(reset_partial_state=True)
            GradientState._reset_state()


def benchmark_main(monkeypatch, capsys, script: str, *argv) -> str:
    """benchmarks/<script>.py's main() run with `argv` in this process (its command line is not
    what is tested; a process would start torch, transformers and TRL again): what it prints."""
    import importlib

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *map(str, argv)])
    module = importlib.import_module(script)
    capsys.readouterr()
    module.main()
    return capsys.readouterr().out
