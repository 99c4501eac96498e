"""The `boundary` command: one subcommand per stage, plus diagnose and seeds.

Each subcommand lives in the module that does the work, as a `main(argv)` with its own
argparse; this file only dispatches, so importing one stage never pulls in torch for another.
"""

from __future__ import annotations

import importlib
import sys

from boundary.errors import BoundaryError

COMMANDS = {
    "pretrain": ("boundary.testbed", "pretrain the synthetic testbed's base model"),
    "import-base": ("boundary.models", "a base model (folder, hub id or GGUF) as a plain folder"),
    "data": ("boundary.data", "write the train, diagnostic and benchmark splits"),
    "calibrate": ("boundary.calibrate", "frozen-base calibration samples (regime labels)"),
    "gate-draws": ("boundary.calibrate", "frozen-base gate draws per refresh epoch"),
    "regimes": ("boundary.regimes", "label regimes from the calibration cache"),
    "masks": ("boundary.gate", "build a per-prompt action mask"),
    "train": ("boundary.train", "GRPO / PBA / controls through one TRL trainer"),
    "evaluate": ("boundary.evaluate", "n-sample evaluation -> samples + per-prompt counts"),
    "report": ("boundary.report", "the paper's tables and figures"),
    "diagnose": ("boundary.diagnose", "regimes, transitions, tables, figures from counts files"),
    "seeds": ("boundary.stats", "seed means, SDs, t intervals and paired gains"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        print("usage: boundary <command> [options]\n\ncommands:")
        for name, (_, help_text) in COMMANDS.items():
            print(f"  {name:<11} {help_text}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"boundary: unknown command {name!r} (see boundary --help)", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    entry = getattr(module, "main_" + name.replace("-", "_"), None) or module.main
    try:
        entry(rest)
    except BoundaryError as err:  # user-caused: one clear line, no traceback
        print(f"boundary {name}: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
