"""On PYTHONPATH of a test's `boundary train` subprocess: the stand-in engine (standin_engine.py)."""

import os

if os.environ.get("BOUNDARY_STANDIN_ENGINE"):
    import standin_engine

    standin_engine.patch()
