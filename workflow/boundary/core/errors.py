"""What a user sees of a problem: the one exception type for errors a user can cause (config,
data, paths, model output), and the one-line warning."""

import sys


class BoundaryError(Exception):
    """Reported by the CLI as a single line naming the field or file; never a traceback."""


def warn(message: str) -> None:
    """A warning a user should read: one line on stderr (a number that may be wrong is never
    printed silently)."""
    print(f"warning: {message}", file=sys.stderr)
