"""Names the pipeline gives things, written once: the Snakefile, the stages and the analysis
read them from here (no imports: the Snakefile's parse stays light)."""

# The frozen base wherever methods are listed: its artifacts (eval/{bench}/base/seed0), tables
# and figures. A name no method may take.
BASE = "base"
