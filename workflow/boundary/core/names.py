"""Names the pipeline gives things, written once: the Snakefile, the stages, the analysis and
config validation read them from here (no imports: the Snakefile's parse stays light)."""

# The frozen base wherever methods are listed: its artifacts (eval/{bench}/base/seed0), tables
# and figures. A name no method may take.
BASE = "base"

# The diagnostic split's evaluation folder (eval/diagnostic/...), beside the benchmarks'.
DIAGNOSTIC = "diagnostic"

# What a method, mask or benchmark name may hold: it becomes a folder, a file and a rule name,
# and the rules' wildcards match only these characters (the schema's `name` says the same;
# tests/test_config.py holds them equal).
NAME_PATTERN = r"[A-Za-z0-9_]+"

# Mask kinds that read the gate draws (the first G0 of each epoch) and take G0 and tau from
# the gate section unless the mask sets them.
GATED = ("gate", "soft", "solved")

# Names the pipeline already uses where a config's names go, by config section.
RESERVED = {
    "methods": {BASE: f"eval/*/{BASE}/ is the frozen base's evaluation"},
    "data.benchmarks": {DIAGNOSTIC: f"eval/{DIAGNOSTIC}/ is the diagnostic split's evaluation"},
}
