"""The one exception type for errors a user can cause (config, data, paths, model output)."""


class BoundaryError(Exception):
    """Reported by the CLI as a single line naming the field or file; never a traceback."""
