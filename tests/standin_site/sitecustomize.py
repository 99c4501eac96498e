"""On PYTHONPATH of a test's `boundary train` subprocess: the stand-in engine (standin_engine.py).
Not in the processes multiprocessing starts (the verifier's workers, its resource tracker): they
train nothing, and importing TRL in each made a 2-process run's first step 20 s longer."""

import os
import sys

if os.environ.get("BOUNDARY_STANDIN_ENGINE") and "--multiprocessing-fork" not in sys.argv and sys.argv != ["-c"]:
    import standin_engine

    standin_engine.patch()
