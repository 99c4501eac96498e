# Config validation and the helpers that every rules file shares: result paths, resources,
# code inputs. Each stage's settings are the settings layer's (core/settings.py): one call.
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from boundary.training.anchors import BASE_SAMPLED
from boundary.core.names import BASE, DIAGNOSTIC, NAME_PATTERN
from boundary.core.config import check_data_files, load_yaml, validate_config
from boundary.core.errors import BoundaryError
from boundary.core import settings
from boundary.analysis.report_settings import figure_names, table_names
from boundary.cli import COMMANDS
from boundary.tasks.arithmetic import levels_text
from boundary.core import digests, sources
from boundary.core.gpus import jobs_per_gpu


def stop(line):
    """A user error found while the workflow starts: one line on stderr and exit 1, before any
    job runs (a WorkflowError would add Snakemake's file, line and traceback lines)."""
    print(line, file=sys.stderr, flush=True)
    sys.exit(1)


try:
    for _configfile in workflow.configfiles:  # Snakemake's loader keeps the last of a duplicate key
        load_yaml(_configfile)
except BoundaryError as err:  # names the file
    stop(str(err))
try:
    config = validate_config(config)
except BoundaryError as err:
    stop(f"{', '.join(map(str, workflow.configfiles)) or 'config'}: {err}")

# The digest store (core/digests.py), for this process and the jobs it starts: their writers
# record what they write.
os.environ[digests.ENV] = str(Path(".snakemake", "boundary-digests").absolute())

RUN = config["run"]
OUT = f"results/{RUN}"
TESTBED = config["testbed"] is not None
BENCHMARKS = settings.benchmarks(config)
TRAINED = {m: s for m, s in config["methods"].items() if not s["checkpoint_of"]}
SAMPLE_GPUS = 1 if config["train"]["gpus"] else 0  # a sampling job's GPUs
# A training job with a colocated vLLM engine owns its GPUs (`boundary --gpus N --own`); its
# `gpu` resource counts every slot of them (job_resources).
TRAIN_OWNS = settings.train_owns_gpus(config)
TRAIN_GPUS = f"{config['train']['gpus']}{' --own' if TRAIN_OWNS else ''}"  # the train rule's --gpus
try:
    JOBS_PER_GPU = jobs_per_gpu()
except BoundaryError as err:
    stop(str(err))
# Methods whose anchored prompts train on frozen-base rollouts, drawn ahead by base_rollouts.
PRE_DRAWN = [
    m
    for m, s in TRAINED.items()
    if settings.anchoring(s["mask"] is not None, s["masked_action"]) and s["anchor"] in BASE_SAMPLED
]


def job_resources(kind, gpus=None, own=False):
    """What a job of this kind asks for (config `resources:`), on the SLURM partition for
    CPU or GPU jobs (config `slurm:`, set by the SLURM profile). `gpu` is set for the stages
    that claim GPUs (`boundary --gpus N`): it counts device slots, $BOUNDARY_JOBS_PER_GPU a
    device, and a job that owns its devices (`own`) counts all of theirs, so Snakemake starts
    nothing beside it that `--resources gpu=<devices x slots>` cannot hold (a SLURM job gets
    its devices from the scheduler: there `gpu` is the device count). CPUs are asked for
    explicitly: Snakemake caps `threads` at the controller's --cores, even for SLURM jobs."""
    spec, slurm = config["resources"][kind], config["slurm"]
    res = {"mem_mb": spec["mem_mb"], "runtime": spec["runtime"], "cpus_per_task": spec["cpus"]}
    if gpus is not None:
        res["gpu"] = gpus * JOBS_PER_GPU if own and workflow.local_exec else gpus
    partition = slurm["gpu_partition"] if gpus else slurm["cpu_partition"]
    if partition:
        res["slurm_partition"] = partition
    if slurm["account"]:
        res["slurm_account"] = slurm["account"]
    stop = int(slurm["train_stop_seconds"])  # text where a profile set it
    if kind == "train" and stop:
        # To every process of the job's step (no B:, which signals the batch shell alone):
        # training stops at a step boundary with a checkpoint (training/launch.py).
        res["slurm_extra"] = f"--signal=TERM@{stop}"
    return res


def job_threads(kind):
    return config["resources"][kind]["cpus"]


def as_param(value):
    """Stage settings for params: sorted-key JSON, so equal settings print equally.

    Wrapped in a function so Snakemake does not read braces in the JSON as wildcards.
    """
    text = settings.text(value)
    return lambda wildcards: text


def code(command):
    """The package sources `boundary <command>` runs, derived from the import graph (dispatcher
    and stage module, and everything they import): an edit reruns exactly the rules that run
    it, compared by content (a touch alone reruns nothing). Relative to the working directory:
    Snakemake keys its records by the path, so results made in one checkout are up to date in
    another (a GPU machine's copy of the checkout, say)."""
    return [os.path.relpath(path) for path in sources.files("boundary.cli", COMMANDS[command][0])]


def content(path_of):
    """A param holding the content digest of the file or folder `path_of(wildcards)` names
    (core/digests.py; none for None): an edit in place reruns the job, a touch or a copy does
    not. A function of the wildcards alone, so Snakemake compares it (params derived from
    `input` are not)."""

    def param(wildcards):
        path = path_of(wildcards)
        return "" if path is None else digests.digest(path)

    return param


def seeds_of(method):
    return settings.seeds_of(config, method)


def base_model():
    """The base model folder every stage loads: pretrained (testbed) or imported here."""
    return f"{OUT}/models/base"


def arithmetic_files():
    """The generated arithmetic task's JSONL splits (config `arithmetic:`), if any."""
    spec = config["arithmetic"]
    return [f"{OUT}/arithmetic/{split}.jsonl" for split in spec["splits"]] if spec else []


def generated_data(split):
    """A split's data file when a rule of this run writes it (the split's job waits for it)."""
    path = settings.dataset_spec(config, split)["path"]
    return [path] if path in arithmetic_files() else []


def base_rollout_files(method, seed):
    """The base_rollouts stage's shard files a training run reads (none if it draws none)."""
    if method not in PRE_DRAWN:
        return []
    return [f"{OUT}/base_rollouts/{method}/seed{seed}/{i}.parquet" for i in range(config["sampling"]["shards"])]


def policy_dir(method, seed):
    """The model folder evaluated for a method: base, a final policy, or a checkpoint."""
    if method == BASE:
        return base_model()
    spec = config["methods"][method]
    if spec["checkpoint_of"] and spec["step"] < config["train"]["steps"]:
        return f"{OUT}/train/{spec['checkpoint_of']}/seed{seed}/step{spec['step']}"
    return f"{OUT}/train/{spec['checkpoint_of'] or method}/seed{seed}/final"


BASE_SEEDS = settings.base_seeds(config)


def eval_targets(bench):
    for seed in range(BASE_SEEDS):
        yield f"{OUT}/eval/{bench}/{BASE}/seed{seed}/counts.parquet"
    for method in config["methods"]:
        for seed in seeds_of(method):
            yield f"{OUT}/eval/{bench}/{method}/seed{seed}/counts.parquet"


def eval_samples(bench):
    """The samples files beside eval_targets' counts files (the report quotes lost prompts' answers)."""
    return [str(Path(t).with_name("samples.parquet")) for t in eval_targets(bench)]


def eval_split(wc):
    if wc.bench == DIAGNOSTIC:
        return f"{OUT}/splits/diagnostic.parquet"
    return f"{OUT}/splits/bench_{wc.bench}.parquet"


def train_outputs(method):
    steps = [s for s in config["train"]["checkpoints"] if s < config["train"]["steps"]]
    return [directory(f"{OUT}/train/{method}/seed{{seed}}/step{s}") for s in steps]


def report_outputs():
    tables = [f"{OUT}/tables/{t}.{ext}" for t in table_names(REPORT) for ext in ("tex", "md")]
    csvs = [report(f"{OUT}/tables/{t}.csv", category="Tables") for t in table_names(REPORT)]
    figures = [f"{OUT}/figures/{f}.pdf" for f in figure_names(REPORT)]
    pngs = [report(f"{OUT}/figures/{f}.png", category="Figures") for f in figure_names(REPORT)]
    audit = [directory(f"{OUT}/diagnostics"), f"{OUT}/release/diagnostic_split.jsonl"]
    return [f"{OUT}/report.html", f"{OUT}/eval_counts.parquet"] + audit + tables + csvs + figures + pngs


def calibration_shards(part=""):
    """The calibrate_base_shard files one calibration joins (none with calibration.shards 1)."""
    count = config["calibration"]["shards"]
    return [] if count == 1 else [f"{OUT}/rollouts/base_calibration{part}_shards/{i}.parquet" for i in range(count)]


def mask_files():
    used = {s["mask"] for s in TRAINED.values() if s["mask"]}
    return [f"{OUT}/masks/{m}.parquet" for m in sorted(used)]


def run_artifacts():
    """Every declared output of the run (temp shards aside). The target `all` asks for each:
    Snakemake deletes a failed job's outputs and only rebuilds what a target lacks, so with
    just the report as target a policy or mask lost to a failed rerun would leave "Nothing to
    be done" beside a report whose inputs are gone. Now it is made again, with all downstream."""
    masks = mask_files()
    kinds = {config["masks"][Path(m).stem]["kind"] for m in masks}
    files = [
        f"{OUT}/splits/train.parquet",
        f"{OUT}/splits/diagnostic.parquet",
        *[f"{OUT}/splits/bench_{b}.parquet" for b in BENCHMARKS],
        f"{OUT}/rollouts/base_calibration.parquet",
        *calibration_shards(),
        f"{OUT}/regimes/regimes.parquet",
        *masks,
        base_model(),
        *arithmetic_files(),
    ]
    if masks:
        files.append(f"{OUT}/rollouts/base_gate.parquet")
    if "oracle" in kinds:
        files += [f"{OUT}/rollouts/base_calibration_train.parquet", f"{OUT}/regimes/train_regimes.parquet"]
        files += calibration_shards("_train")
    for method in TRAINED:
        for seed in seeds_of(method):
            folder = f"{OUT}/train/{method}/seed{seed}"
            files += [f"{folder}/final", f"{folder}/log.parquet", f"{folder}/actions.parquet"]
            files += [str(d).format(seed=seed) for d in train_outputs(method)]
            files += base_rollout_files(method, seed)
    for bench in [DIAGNOSTIC] + BENCHMARKS:
        for counts in eval_targets(bench):
            files += [counts, str(Path(counts).with_name("samples.parquet"))]
    return files


try:
    REPORT = settings.report_key(config)
except BoundaryError as err:  # the config's report: section
    stop(f"{', '.join(map(str, workflow.configfiles)) or 'config'}: {err}")


def edited_artifacts():
    """The run's artifacts that changed since the pipeline wrote them (core/digests.py)."""
    paths = [str(p) for p in run_artifacts() + report_outputs()]
    return [p for p in dict.fromkeys(paths) if digests.changed_since_written(p)]


# An artifact changed by hand (a samples.parquet truncated, a model re-saved in place) would
# be kept beside results made from what the pipeline wrote, or, if something reads it, be used
# in silence: name it before anything runs. Jobs that Snakemake starts for itself skip this,
# and so do the commands that run no job but clear the way (the Snakefile is read before
# Snakemake acts on them, and a user needs --unlock after a kill whatever else is wrong).
HOUSEKEEPING = {
    "--unlock",
    "--touch",
    "-t",
    "--delete-all-output",
    "--delete-temp-output",
    "--cleanup-metadata",
    "--cm",
}
if not (workflow.remote_exec or workflow.subprocess_exec or HOUSEKEEPING & set(sys.argv)):
    try:  # a missing data file: named now, not in a failed job's log ("At least one job did not complete")
        check_data_files(config, arithmetic_files())
    except BoundaryError as err:
        stop(f"{', '.join(map(str, workflow.configfiles)) or 'config'}: {err}")
    _edited = edited_artifacts()
    if _edited:
        _more = f" (and {len(_edited) - 1} more)" if len(_edited) > 1 else ""
        raise WorkflowError(
            f"{_edited[0]}{_more}: changed since the pipeline wrote it; delete it "
            "to have it made again (with what depends on it), or move it elsewhere to keep it"
        )
