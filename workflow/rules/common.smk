# Config validation and the helpers every rule file uses: result paths, per-stage settings
# (only the values that affect a stage, serialised with sorted keys) and code inputs.
import hashlib
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from boundary.config import dumps, validate_config
from boundary.errors import BoundaryError

try:
    config = validate_config(config)
except BoundaryError as err:
    raise WorkflowError(str(err))

RUN = config["run"]
OUT = f"results/{RUN}"
TESTBED = config["testbed"] is not None
PKG = Path(workflow.basedir) / "workflow" / "boundary"
BENCHMARKS = (
    ["testbed"] if TESTBED else sorted(config["data"]["benchmarks"])
)
TRAINED = {m: s for m, s in config["methods"].items() if not s["checkpoint_of"]}


wildcard_constraints:
    seed=r"\d+",
    method=r"[A-Za-z0-9_]+",
    mask=r"[A-Za-z0-9_]+",
    bench=r"[A-Za-z0-9_]+",


def code(*modules):
    """Package sources a stage runs: content changes rerun it, mere touches do not."""
    base = ["cli", "config", "errors", "artifacts"]
    return [str(PKG / f"{m}.py") for m in base + list(modules)]


def base_model():
    return f"{OUT}/models/base" if TESTBED else config["base_model"]


def seeds_of(method):
    spec = config["methods"][method]
    source = spec["checkpoint_of"] or method
    return spec.get("seeds") or config["methods"][source].get("seeds") or config["train"]["seeds"]


def sampling_settings():
    return {"sampling": config["sampling"], "verify": config["verify"]}


def refresh_epochs():
    return math.ceil(config["train"]["steps"] / config["gate"]["refresh_steps"])


def mask_settings(mask):
    """A mask's own parameters; gate-kind masks inherit G0 and tau from the gate section."""
    spec = dict(config["masks"][mask])
    if spec["kind"] in ("gate", "soft"):
        spec.setdefault("G0", config["gate"]["G0"])
        spec.setdefault("tau", config["gate"]["tau"])
    spec["epochs"] = refresh_epochs()
    return spec


def train_settings(method):
    spec = {k: v for k, v in config["methods"][method].items()
            if k not in ("label", "seeds", "setting", "checkpoint_of", "step")}
    return {**config["train"], "refresh_steps": config["gate"]["refresh_steps"],
            "extractor": config["verify"]["extractor"],
            "verify_timeout": config["verify"]["timeout"], **spec}


def settings_hash(settings):
    return hashlib.sha256(dumps(settings).encode()).hexdigest()[:12]


def policy_dir(method, seed):
    """The model folder evaluated for a method: base, a final policy, or a checkpoint."""
    if method == "base":
        return base_model()
    spec = config["methods"][method]
    if spec["checkpoint_of"] and spec["step"] < config["train"]["steps"]:
        return f"{OUT}/train/{spec['checkpoint_of']}/seed{seed}/step{spec['step']}"
    return f"{OUT}/train/{spec['checkpoint_of'] or method}/seed{seed}/final"


def eval_targets(bench):
    yield f"{OUT}/eval/{bench}/base/seed0/counts.parquet"
    for method in config["methods"]:
        for seed in seeds_of(method):
            yield f"{OUT}/eval/{bench}/{method}/seed{seed}/counts.parquet"
