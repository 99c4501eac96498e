"""The `boundary` command: one subcommand per stage, plus diagnose and seeds.

Each subcommand lives in the module that does the work, as a `main(argv)` with its own
argparse; this file only dispatches, so importing one stage never pulls in torch for another.
`boundary --gpus N <command>` first claims N GPUs no other job holds (see gpus.py); the
rules of GPU stages call it with their `resources: gpu`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys

from boundary.errors import BoundaryError
from boundary.gpus import claim

COMMANDS = {
    "pretrain": ("boundary.testbed", "pretrain the synthetic testbed's base model"),
    "import-base": ("boundary.models", "a base model (folder, hub id or GGUF) as a plain folder"),
    "data": ("boundary.data", "write the train, diagnostic and benchmark splits"),
    "calibrate": ("boundary.calibrate", "frozen-base calibration samples (regime labels)"),
    "gate-draws": ("boundary.calibrate", "frozen-base gate draws per refresh epoch"),
    "regimes": ("boundary.regimes", "label regimes from the calibration cache"),
    "masks": ("boundary.gate", "build a per-prompt action mask"),
    "base-rollouts": ("boundary.base_rollouts", "frozen-base rollouts of a run's base-sampled anchors, before training"),
    "train": ("boundary.launch", "GRPO / PBA / controls through one TRL trainer (a process per GPU)"),
    "evaluate": ("boundary.evaluate", "n-sample evaluation -> samples + per-prompt counts"),
    "report": ("boundary.report", "the paper's tables and figures"),
    "diagnose": ("boundary.diagnose", "regimes, transitions, tables, figures from counts files"),
    "seeds": ("boundary.stats", "seed means, SDs, t intervals and paired gains"),
    "cluster-check": ("boundary.cluster", "name the rules a SLURM cluster can never schedule"),
}


class ArgumentParser(argparse.ArgumentParser):
    """argparse for subcommands: a bad or missing option is a BoundaryError, so the CLI prints
    it as the same one line as every other user error."""

    def error(self, message):
        raise BoundaryError(message)


def _typed(convert, check, wanted):
    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not check(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}")
        return value
    parse.__name__ = wanted  # argparse names the type in some messages
    return parse


def _whole(text: str) -> int:
    return int(text.strip())  # int() refuses "1.9" and "1e3"


def _ks(text: str) -> list[int] | None:
    parts = text.split(",")
    return [_whole(x) for x in parts] if all(x.strip() for x in parts) else None


def _numbers(text: str) -> list[float] | None:
    parts = text.split(",")
    return [float(x) for x in parts] if all(x.strip() for x in parts) else None


# Option types: a value outside its range is "argument --level: '1.5' is not ...".
LEVEL = _typed(float, lambda x: 0 < x < 1, "a number between 0 and 1 (exclusive)")
FRACTION = _typed(float, lambda x: 0 <= x <= 1, "a number between 0 and 1")
POSITIVE = _typed(_whole, lambda x: x >= 1, "a whole number >= 1")
NONNEGATIVE = _typed(_whole, lambda x: x >= 0, "a whole number >= 0")
KS = _typed(_ks, lambda ks: all(k >= 1 for k in ks) and len(set(ks)) == len(ks),
            "a comma-separated list of distinct whole numbers >= 1")
EDGES = _typed(_numbers, lambda xs: len(set(xs)) >= 2 and all(0 <= x <= 1 for x in xs),
               "at least two distinct comma-separated numbers between 0 and 1")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    gpus = None
    if argv and argv[0] == "--gpus":
        if len(argv) < 2 or not argv[1].isdigit():
            print("boundary: --gpus takes a GPU count: boundary --gpus N <command> ...", file=sys.stderr)
            return 2
        gpus, argv = int(argv[1]), argv[2:]
    if not argv or argv[0] in {"-h", "--help"}:
        print("usage: boundary [--gpus N] <command> [options]\n\ncommands:")
        for name, (_, help_text) in COMMANDS.items():
            print(f"  {name:<13} {help_text}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"boundary: unknown command {name!r} (see boundary --help)", file=sys.stderr)
        return 2
    try:
        # Devices are claimed before the stage imports torch, so CUDA only ever sees them.
        with contextlib.nullcontext() if gpus is None else claim(gpus):
            module = importlib.import_module(COMMANDS[name][0])
            entry = getattr(module, "main_" + name.replace("-", "_"), None) or module.main
            entry(rest)
    except BoundaryError as err:  # user-caused: one clear line, no traceback
        _say(f"boundary {name}: error: {err}")
        return 1
    except Exception as err:  # a full disk that no writer named: still one line
        from boundary.artifacts import storage_full

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
