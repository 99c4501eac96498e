# boundary: diagnose pass@k inversion in RLVR and train with Per-Problem Base Anchoring.
#   snakemake --cores all                          the embedded default (CPU testbed)
#   snakemake --cores all --configfile config/paper.yaml   the paper's run (8 GPUs)
from snakemake.utils import min_version

min_version("9.0")

# A --configfile replaces the embedded default instead of merging into it, so a paper or
# custom config never inherits testbed methods or sections.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"


wildcard_constraints:
    seed=r"\d+",
    method=NAME_PATTERN,
    mask=NAME_PATTERN,
    bench=NAME_PATTERN,
    shard=r"\d+",


include: "workflow/rules/data.smk"
include: "workflow/rules/base.smk"
include: "workflow/rules/calibrate.smk"
include: "workflow/rules/regimes.smk"
include: "workflow/rules/masks.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"


# Everything the run produces, not only the report: an artifact that a failed job's cleanup or
# a user removed is made again, with everything that depends on it (see run_artifacts).
rule all:
    default_target: True
    input:
        rules.report.output,
        run_artifacts(),
