"""The TRL release the trainer is written against, written once.

PBATrainer (trainer.py) overrides private GRPOTrainer hooks and rollout_engine.py swaps
`trl.generation.vllm_generation.LLM` while TRL builds its engine: another release may rename a
hook, change what it returns, or build its engine otherwise, and would train something else
without a word. Importing trainer.py refuses any other installed release in one line, before
TRL itself is imported. pyproject.toml pins the same release (tests/test_train.py keeps them equal).
"""

from __future__ import annotations

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


require_pinned()  # at import: trainer.py imports this module before TRL
