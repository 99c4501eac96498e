"""What a user sees of a problem: the one exception type for errors a user can cause (config,
data, paths, model output), and the one-line warning (each said once inside `once()`)."""

import contextlib
import sys

_said: set | None = None  # inside `once()`: the warnings already printed


class BoundaryError(Exception):
    """Reported by the CLI as a single line naming the field or file; never a traceback."""


def warn(message: str) -> None:
    """A warning a user should read: one line on stderr (a number that may be wrong is never
    printed silently); inside `once()`, a line already printed is not printed again."""
    if _said is not None:
        if message in _said:
            return
        _said.add(message)
    print(f"warning: {message}", file=sys.stderr)


@contextlib.contextmanager
def once():
    """A command's span in which each warning is printed once (the same check on several splits
    or files of one command says it once)."""
    global _said
    before, _said = _said, set() if _said is None else _said
    try:
        yield
    finally:
        _said = before
