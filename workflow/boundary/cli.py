"""The `boundary` command: user commands (diagnose, seeds, power, ...) and one subcommand per
pipeline stage.

Each subcommand lives in the module that does the work, as a `main(argv)` with its own
argparse built by `make_parser()`; this file only dispatches, so importing one stage never
pulls in torch for another. `parsers()` yields every command's parser (the CLI reference,
docs/reference/cli.md, is generated from it). `boundary --gpus N <command>` first claims N GPUs
no other job holds (see gpus.py); `--gpus N --own` claims every slot of them, so no other job
shares them (a training job's colocated vLLM engine). The rules of GPU stages call it.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator

from boundary import __version__
from boundary.core.errors import BoundaryError, once
from boundary.core.gpus import claim

# What a researcher runs by hand, on any run's files or before one.
USER_COMMANDS = {
    "diagnose": ("boundary.analysis.diagnose", "regimes, transitions, tables, figures from counts files"),
    "seeds": ("boundary.analysis.stats", "seed means, SDs, t intervals and paired gains"),
    "power": ("boundary.analysis.power", "diagnostic prompts and seeds that resolve a Boundary change"),
    "stage-times": ("boundary.analysis.stage_times", "every job's wall time and peak memory from a run's benchmarks"),
    "arithmetic": ("boundary.tasks.arithmetic", "seeded arithmetic word problems as JSONL splits"),
    "get-data": ("boundary.tasks.benchmarks", "GSM8K, MATH500, Omni-MATH-Rule into data/ (hub or local copy)"),
    "check-config": ("boundary.core.config", "check config files as the workflow would (--configfile)"),
    "cluster-check": ("boundary.core.cluster", "name the rules a SLURM cluster can never schedule"),
    "export": ("boundary.sampling.export", "a LoRA policy merged into its base as a plain model folder"),
}
# What the workflow's rules run (one per stage); each can be run by hand with the rule's options.
STAGES = {
    "pretrain": ("boundary.stages.pretrain", "pretrain the synthetic testbed's base model"),
    "import-base": ("boundary.stages.import_base", "a base model (folder, hub id or GGUF) as a plain folder"),
    "data": ("boundary.stages.data", "write the train, diagnostic and benchmark splits"),
    "calibrate": ("boundary.stages.calibrate", "frozen-base calibration samples (regime labels)"),
    "gate-draws": ("boundary.stages.calibrate", "frozen-base gate draws per refresh epoch"),
    "regimes": ("boundary.stages.regimes", "label regimes from the calibration cache"),
    "masks": ("boundary.stages.masks", "build a per-prompt action mask"),
    "base-rollouts": ("boundary.stages.base_rollouts",
                      "frozen-base rollouts of a run's base-sampled anchors, before training"),
    "train": ("boundary.stages.train", "GRPO / PBA / controls through one TRL trainer (a process per GPU)"),
    "evaluate": ("boundary.stages.evaluate", "n-sample evaluation -> samples + per-prompt counts"),
    "report": ("boundary.stages.report", "the paper's tables and figures, and the run's report.html"),
}
COMMANDS = {**USER_COMMANDS, **STAGES}

USAGE = "usage: boundary [--version] [--gpus N [--own]] <command> [options]   (boundary <command> --help)"


def _entry(module, name: str, kind: str):
    """A command's `main_<name>` / `make_parser_<name>` where a module serves two, else its own."""
    return getattr(module, f"{kind}_{name.replace('-', '_')}", None) or getattr(module, kind)


def parsers() -> Iterator[tuple[str, object]]:
    """(command, its argparse parser) for every command, user commands first, then the stages,
    in `boundary --help` order. Imports each command's module (never torch or TRL)."""
    for name, (module, _) in COMMANDS.items():
        yield name, _entry(importlib.import_module(module), name, "make_parser")()


def usage() -> str:
    lines = [USAGE, "", "user commands:"]
    lines += [f"  {name:<14} {text}" for name, (_, text) in USER_COMMANDS.items()]
    lines += ["", "pipeline stages (the workflow's rules run these):"]
    lines += [f"  {name:<14} {text}" for name, (_, text) in STAGES.items()]
    lines += ["", "options:", "  --version      the package's version",
              "  --gpus N       claim N GPUs no other job holds before the command starts",
              "  --own          with --gpus: every slot of them ($BOUNDARY_JOBS_PER_GPU), no job beside it",
              "", "example:", "  boundary diagnose --base base.parquet --trained grpo:0=grpo.parquet --out diag"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    gpus = None
    if argv and argv[0] == "--gpus":
        if len(argv) < 2 or not argv[1].isdigit():
            print("boundary: --gpus takes a GPU count: boundary --gpus N <command> ...", file=sys.stderr)
            return 2
        gpus, argv = int(argv[1]), argv[2:]
    own = bool(argv and argv[0] == "--own")
    if own and gpus is None:
        print("boundary: --own claims GPUs whole: boundary --gpus N --own <command> ...", file=sys.stderr)
        return 2
    if own:
        argv = argv[1:]
    if argv and argv[0] == "--version":
        print(f"boundary {__version__}")
        return 0
    if not argv or argv[0] in {"-h", "--help"}:
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"boundary: unknown command {name!r} (see boundary --help)", file=sys.stderr)
        return 2
    try:
        # Devices are claimed before the stage imports torch, so CUDA only ever sees them.
        with contextlib.nullcontext() if gpus is None else claim(gpus, own=own), once():  # each warning once
            _entry(importlib.import_module(COMMANDS[name][0]), name, "main")(rest)
    except BoundaryError as err:  # user-caused: one clear line, no traceback
        _say(f"boundary {name}: error: {err}")
        return 1
    except Exception as err:  # a full disk that no writer named: still one line
        from boundary.core.artifacts import storage_full

        why = storage_full(err)
        if why is None:
            raise
        where = getattr(err, "filename", None)
        _say(f"boundary {name}: error: {where + ': ' if where else ''}cannot be written: {why}")
        return 1
    return 0


def _say(line: str) -> None:
    """Print an error line; where stderr is a log on the full disk, the terminal gets it."""
    try:
        print(line, file=sys.stderr, flush=True)
        return
    except OSError:
        pass
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(line + "\n")
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
