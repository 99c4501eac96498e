"""The TRL release the trainer is written against, written once.

PBATrainer (trainer.py) overrides private GRPOTrainer hooks and rollout_engine.py swaps
`trl.generation.vllm_generation.LLM` while TRL builds its engine: another release may rename a
hook, change what it returns, or build its engine otherwise, and would train something else
without a word. Importing trainer.py refuses any other installed release in one line, before
TRL itself is imported. pyproject.toml pins the same release (tests/test_train.py keeps them equal).
"""

from __future__ import annotations

import sys
from importlib import metadata

from boundary.core.errors import BoundaryError

PINNED = "1.16.0"


def installed() -> str | None:
    """The installed TRL's version (its distribution metadata: TRL itself is not imported)."""
    try:
        return metadata.version("trl")
    except metadata.PackageNotFoundError:
        return None


def require_pinned(found: str | None = None) -> None:
    """Refuse, in one line, a TRL other than PINNED (`found`: the installed one by default)."""
    found = installed() if found is None else found
    if found != PINNED:
        have = f"TRL {found} is installed" if found else "TRL is not installed"
        raise BoundaryError(f"{have}; boundary's trainer overrides private hooks of TRL {PINNED} and needs "
                            f"exactly that release (pip install trl=={PINNED})")


def without_vllm() -> None:
    """Have TRL take vLLM as absent. TRL 1.16.0 imports vLLM wherever it is installed, at
    `from trl import GRPOTrainer` (trl.generation), about 10 s of a training process's start on
    a CPU; a run whose rollouts come from transformers' generate never calls it. Call before
    TRL's trainer is imported (once trl.generation is loaded this changes nothing)."""
    if "trl.generation" in sys.modules:
        return
    from trl import import_utils

    import_utils.is_vllm_available = lambda min_version=None: False


require_pinned()  # at import: trainer.py imports this module before TRL
