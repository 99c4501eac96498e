"""The settings layer: from the validated config to what each stage is given, and from what a
stage is given to every value its code reads. Plain Python: the rules call it, and so do the
stages, the trainer's config, the report, the tests and the benchmarks.

Two functions a stage, one on each side of the `--settings` JSON:
- the key (`<stage>_key(config, ...)`): the short dict the stage's rule hashes as its params,
  only what affects that stage, so Snakemake reruns exactly the stages a change invalidates.
  Its JSON is a finished run's identity: tests/test_settings.py holds it to a snapshot.
- the complete settings (`resolve(stage, given)`; `load(stage, text)` for a `--settings`
  argument): the given dict checked against the stage's part of the schema, a bad one refused
  in one line naming the key, with every default resolved once, `default:` and `x-default:`
  alike. Code reads these and writes no default of its own (tests/test_settings.py checks).

`defaults(section)` reads the schema's defaults from schema_defaults.json beside this file, the
schema's own rendered as JSON (tests/test_settings.py keeps it equal): `boundary diagnose`
reads its defaults there, and runs without PyYAML or jsonschema (readers and analysis only).
Everything else here is the pipeline's and imports core.config (PyYAML) when called.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from pathlib import Path

from boundary.core.errors import BoundaryError
from boundary.core.names import BASE, GATED

DEFAULTS_PATH = Path(__file__).with_name("schema_defaults.json")

# Settings training reads from other sections: name -> (section, key).
TRAIN_DERIVED = {"refresh_steps": ("gate", "refresh_steps"), "extractor": ("verify", "extractor"),
                 "verify_timeout": ("verify", "timeout")}
# Keys a training run needs in its settings; the rest have defaults.
TRAIN_REQUIRED = ["steps", "lr", "num_generations", "prompts_per_step"]
# An x-default (generate runs' keys stay) that a vllm run's key holds all the same: those runs
# trained with TRL's correction on before the key existed and train without it now, so a
# finished one must not count as done.
ENGINE_KEYED = "vllm_importance_sampling"
SPLITS = ("train", "diagnostic")
# The base's i-th evaluation samples at evaluate.seed + i * this prime, apart from shard offsets.
BASE_SEED_STRIDE = 104729


# ---- helpers the keys share --------------------------------------------------------------

def refresh_epochs(steps: int, refresh_steps: int) -> int:
    """Gate refresh epochs of a run of `steps` steps: the last one may be cut short."""
    return math.ceil(steps / refresh_steps)


def dataset_spec(config: dict, split: str) -> dict:
    """The `data:` entry a real-data split ("train", "diagnostic", "bench_<name>") is read from."""
    data = config["data"]
    return data[split] if split in SPLITS else data["benchmarks"][split[len("bench_"):]]


def extractor_of(config: dict, split: str) -> str:
    """The answer extractor for a split ("train", "diagnostic" or a benchmark name): the
    dataset's own `extractor`, else verify.extractor."""
    if config["testbed"] is not None:
        return config["verify"]["extractor"]
    spec = dataset_spec(config, split if split in SPLITS else f"bench_{split}")
    return spec["extractor"] or config["verify"]["extractor"]


def benchmarks(config: dict) -> list[str]:
    """The run's benchmark names: the testbed's one, or the `data.benchmarks` entries, sorted."""
    return ["testbed"] if config["testbed"] is not None else sorted(config["data"]["benchmarks"])


def seeds_of(config: dict, method: str) -> list[int]:
    """A method's seeds: its own, else those of the method it takes a checkpoint of, else train.seeds."""
    spec = config["methods"][method]
    source = spec["checkpoint_of"] or method
    return spec.get("seeds") or config["methods"][source].get("seeds") or config["train"]["seeds"]


def sampling_key(config: dict, split: str, *, sharded: bool = True) -> dict:
    """Sampling and verification settings of a stage that samples `split`. sampling.shards
    splits evaluations and base rollouts into jobs; a stage it does not split (`sharded` False:
    the calibration, the gate's draws) holds it at 1, so that changing it between GPU leases
    remakes neither (keys made before keep their value: 1 is the default)."""
    sampling = config["sampling"] if sharded else {**config["sampling"], "shards": 1}
    return {"sampling": sampling, "verify": {**config["verify"], "extractor": extractor_of(config, split)}}


# ---- the keys: what each rule hashes --------------------------------------------------------

def pretrain_key(config: dict) -> dict:
    return {k: config["testbed"][k] for k in ("task", "model", "pretrain")}


def data_key(config: dict, split: str | None = None) -> dict:
    """The testbed's splits (one job, `split` unused) or one real split: that dataset alone."""
    if config["testbed"] is not None:
        return {"testbed": config["testbed"], "data": config["data"], "prompt": config["prompt"]}
    if split in SPLITS:
        data = {split: dataset_spec(config, split)}
    else:
        data = {"benchmarks": {split[len("bench_"):]: dataset_spec(config, split)}}
    return {"data": data, "prompt": config["prompt"]}


# Calibration keys read only by an adaptive calibration: left out of a full one's key, so full
# runs rerun nothing while adaptive is off.
ADAPTIVE_KEYS = ("adaptive", "rounds", "delta")


def calibrate_key(config: dict, split: str) -> dict:
    """The calibration section; an adaptive run adds the regimes' cuts (its stopping rule reads
    them), a full run drops the adaptive keys. One shard (the default) stays out: runs made
    before the key existed rerun nothing."""
    calibration = dict(config["calibration"])
    if calibration.get("shards") == 1:
        calibration.pop("shards")
    if calibration["adaptive"]:
        return {"calibration": calibration, "regimes": config["regimes"], **sampling_key(config, split, sharded=False)}
    for key in ADAPTIVE_KEYS:
        calibration.pop(key, None)
    return {"calibration": calibration, **sampling_key(config, split, sharded=False)}


def mask_key(config: dict, mask: str) -> dict:
    """A mask's own parameters; gated masks inherit G0 and tau from the gate section; a random
    mask's `share_of` brings the named mask's key (share_of_settings), so it is made again when
    that mask would be."""
    spec = dict(config["masks"][mask])
    if spec["kind"] in GATED:
        spec.setdefault("G0", config["gate"]["G0"])
        spec.setdefault("tau", config["gate"]["tau"])
    spec["epochs"] = refresh_epochs(config["train"]["steps"], config["gate"]["refresh_steps"])
    if spec.get("share_of"):
        spec["share_of_settings"] = mask_key(config, spec["share_of"])
    return spec


def gate_draws_key(config: dict) -> dict:
    """One cache for every gated mask: the largest G0 any of them reads, every epoch."""
    sizes = [mask_key(config, m)["G0"] for m, s in config["masks"].items() if s["kind"] in GATED]
    gate = {k: config["gate"][k] for k in ("seed", "temperature", "top_p")}
    epochs = refresh_epochs(config["train"]["steps"], config["gate"]["refresh_steps"])
    return {"gate": {**gate, "G0": max(sizes + [config["gate"]["G0"]]), "epochs": epochs},
            **sampling_key(config, "train", sharded=False)}


def regimes_key(config: dict) -> dict:
    return config["regimes"]


def train_key(config: dict, method: str) -> dict:
    """A trained method's settings (train section, its method entry, the derived keys); the
    base_rollouts stage gets the same."""
    from boundary.core.config import method_settings

    derived = {name: config[section][key] for name, (section, key) in TRAIN_DERIVED.items()}
    derived["extractor"] = extractor_of(config, "train")
    train = dict(config["train"])
    if train.get("rollout_engine") == "vllm":
        train.setdefault(ENGINE_KEYED, defaults("train")[ENGINE_KEYED])
    return {**train, **derived, **method_settings(config["methods"][method])}


def train_owns_gpus(config: dict) -> bool:
    """Whether a training job owns its GPUs (no other job beside it, core/gpus.py): a colocated
    vLLM engine sizes its memory from what it finds free while it starts, and stops when a
    neighbour frees memory meanwhile."""
    train = {**defaults("train"), **config["train"]}
    return train["rollout_engine"] == "vllm" and train["vllm_mode"] == "colocate"


def base_seeds(config: dict) -> int:
    """The base's evaluations of each benchmark (evaluate.base_seeds: an x-default, so a config
    that does not set it leaves it out of every key)."""
    return config["evaluate"].get("base_seeds", defaults("evaluate")["base_seeds"])


def evaluate_key(config: dict, bench: str, method: str, seed: int) -> dict:
    """One (method, seed)'s evaluation: the base's i-th draw samples at its own seed; every
    policy at evaluate.seed (common random numbers across policies). base_seeds itself is left
    out, so adding it reruns no finished evaluation."""
    evaluate = {k: v for k, v in config["evaluate"].items() if k != "base_seeds"}
    if method == BASE and seed:
        evaluate["seed"] += BASE_SEED_STRIDE * seed
    return {"evaluate": evaluate, **sampling_key(config, bench)}


def report_key(config: dict) -> dict:
    """The report's complete settings (its key is the whole of them): derived from the config,
    which its `report:` section overrides."""
    methods, masks = config["methods"], config["masks"]
    ablation_masks = {m for m, s in masks.items() if s["kind"] in ("gate", "soft")}
    pba_mask = methods.get("pba", {}).get("mask")
    derived = {
        "labels": {m: s.get("label", m) for m, s in methods.items()},
        "benchmarks": {b: b for b in benchmarks(config)},
        "ks": config["evaluate"]["ks"],
        "controls": [{"method": m, "label": s.get("label", m), "setting": s["setting"]}
                     for m, s in methods.items() if "setting" in s],
        "ablations": [
            {"method": m, "mask": s["mask"], "G0": mask_key(config, s["mask"])["G0"],
             "tau": mask_key(config, s["mask"])["tau"], "kind": masks[s["mask"]]["kind"]}
            for m, s in methods.items()
            if s["mask"] in ablation_masks and s["masked_action"] == "anchor"
            and (m == "pba" or s["mask"] != pba_mask)
        ],
        "ranked": list(methods),
        "group_size": config["train"]["num_generations"],
        "gate_G0": config["gate"]["G0"],
    }
    try:
        return resolve("report", {**derived, **config["report"]})
    except BoundaryError as err:
        raise BoundaryError(f"config: {err}") from None


# ---- the complete settings: what the code reads ----------------------------------------------

def _section(path: str) -> dict:
    """The schema of a config section by its dotted path ("testbed.task"; "methods" and
    "masks": one entry)."""
    from boundary.core.config import _resolve, _schema

    root = _schema()
    node = root
    for key in path.split("."):
        node = _resolve(node["properties"][key], root)
    if path in ("methods", "masks"):
        node = _resolve(node["additionalProperties"], root)
    return copy.deepcopy(node)


def _object(properties: dict, required=()) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": properties,
            "required": list(required)}


@functools.cache
def stage_schema(stage: str) -> dict:
    """The JSON schema of a stage's `--settings`, made of the config schema's sections."""
    from boundary.core.config import _schema

    root = _schema()
    if stage == "pretrain":
        parts = {k: _section(f"testbed.{k}") for k in ("task", "model", "pretrain")}
        node = _object(parts, parts)
    elif stage == "data":
        data = _section("data")
        data.pop("required")  # a real split's job gets its own dataset alone
        node = _object({"testbed": _section("testbed"), "data": data, "prompt": _section("prompt")},
                       ["prompt"])
    elif stage in ("calibrate", "evaluate"):  # a stage that samples: its section, sampling, verify
        own = "calibration" if stage == "calibrate" else "evaluate"
        node = _object({own: _section(own), "sampling": _section("sampling"), "verify": _section("verify")}, [own])
        if stage == "calibrate":  # an adaptive calibration's stopping rule reads the regimes' cuts
            node["properties"]["regimes"] = _section("regimes")
    elif stage == "gate-draws":
        gate = _section("gate")
        gate["properties"]["epochs"] = {"$ref": "#/definitions/posint"}
        gate["required"] = ["epochs"]
        node = _object({"gate": gate, "sampling": _section("sampling"), "verify": _section("verify")}, ["gate"])
    elif stage == "regimes":
        node = _section("regimes")
    elif stage == "masks":
        node = _section("masks")
        node["properties"]["epochs"] = {"$ref": "#/definitions/posint"}
        node["properties"]["share_of_settings"] = {"type": "object"}  # the named mask's key (mask_key)
        node["required"] = ["kind", "epochs"]
    elif stage in ("train", "base-rollouts"):
        train, method = _section("train"), _section("methods")
        derived = {name: _section(section)["properties"][key]
                   for name, (section, key) in TRAIN_DERIVED.items()}
        node = _object({**train["properties"], **method["properties"], **derived}, TRAIN_REQUIRED)
    elif stage == "report":
        node = _section("report")
    else:
        raise KeyError(stage)
    return {"definitions": root["definitions"], **node}


def _stage_message(err) -> str:
    from boundary.core.config import _message

    if err.validator == "required":
        where = ".".join(str(p) for p in err.absolute_path)
        missing = next(k for k in err.validator_value if k not in err.instance)
        return f"{where + '.' if where else ''}{missing}: missing"
    return _message(err)


def resolve(stage: str, given: dict) -> dict:
    """A stage's complete settings: `given` checked against the stage's schema (one line naming
    the first bad key), every unset key at the schema's default (`default:` or `x-default:`)."""
    from boundary.core.config import MASK_KEYS, REPLACED_TRAIN_KEYS, _fill_defaults, _validator

    if not isinstance(given, dict):
        raise BoundaryError(f"{stage} settings: must be a JSON object, not {type(given).__name__}")
    if stage in ("train", "base-rollouts"):
        for key in sorted(set(given) & set(REPLACED_TRAIN_KEYS)):
            raise BoundaryError(f"{stage} settings: {key}: {REPLACED_TRAIN_KEYS[key]}")
    schema = stage_schema(stage)
    settings = copy.deepcopy(given)
    if stage == "masks" and settings.get("kind") in MASK_KEYS:  # each kind's own keys only
        kind = settings["kind"]
        own = MASK_KEYS[kind] | {"kind", "epochs"} | ({"share_of_settings"} if "share_of" in settings else set())
        unread = sorted(set(settings) - own)
        if unread:
            raise BoundaryError(f"{stage} settings: {unread[0]}: not read by a {kind} mask")
        if kind == "random" and ("fraction" in settings) == ("share_of" in settings):
            raise BoundaryError(f"{stage} settings: a random mask takes fraction or share_of, one of the two")
        schema = {**schema, "required": sorted(own - {"confidence", "fraction", "share_of"}),
                  "properties": {k: v for k, v in schema["properties"].items() if k in own}}
        if isinstance(settings.get("share_of_settings"), dict):  # the named mask's, complete
            settings["share_of_settings"] = resolve(stage, settings["share_of_settings"])
    _fill_defaults(settings, schema, words=("default", "x-default"))
    errors = sorted(_validator(schema).iter_errors(settings),
                    key=lambda e: (len(list(e.absolute_path)), list(map(str, e.absolute_path))))
    if errors:
        raise BoundaryError(f"{stage} settings: {_stage_message(errors[0])}")
    if stage == "calibrate" and settings["calibration"]["adaptive"] and "regimes" not in settings:
        raise BoundaryError(f"{stage} settings: regimes: missing (calibration.adaptive reads its cuts)")
    if stage == "report":
        if not settings["main"]:
            settings["main"] = [settings["baseline"], settings["method"]]
        if not settings["headline"] and settings["benchmarks"]:
            settings["headline"] = next(iter(settings["benchmarks"]))
    return settings


def load(stage: str, value: str) -> dict:
    """A stage's complete settings from its `--settings` (JSON text or a file)."""
    from boundary.core.config import load_stage_settings

    try:
        return resolve(stage, load_stage_settings(value))
    except BoundaryError as err:
        message = str(err)
        raise BoundaryError(message if message.startswith("--settings") else f"--settings: {message}") from None


@functools.cache
def _defaults() -> dict:
    return json.loads(DEFAULTS_PATH.read_text())


def defaults(section: str) -> dict:
    """The schema's defaults of a config section (`default:` and `x-default:`; `methods` and
    `masks`: of one entry), from schema_defaults.json."""
    return copy.deepcopy(_defaults()[section])


def rendered_defaults() -> str:
    """schema_defaults.json as the schema gives it (PyYAML): `write_defaults` writes it."""
    from boundary.core.config import _schema, schema_defaults

    root = _schema()
    sections = [k for k, v in root["properties"].items() if "properties" in v or k in ("methods", "masks")]
    sections += [f"testbed.{k}" for k in ("task", "model", "pretrain")]
    lines = [f"{json.dumps(s)}: {json.dumps(schema_defaults(s), sort_keys=True)}" for s in sorted(sections)]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_defaults() -> None:
    """Render the schema's defaults into schema_defaults.json (after editing the schema)."""
    DEFAULTS_PATH.write_text(rendered_defaults())
    _defaults.cache_clear()


def allowed(section: str, key: str) -> tuple:
    """The values the schema allows a key (its `enum`), e.g. allowed("methods", "kl_estimator")."""
    return tuple(v for v in _section(section)["properties"][key]["enum"] if v is not None)


def text(settings: dict) -> str:
    """The one serialisation of settings (sorted keys): what a rule passes and hashes."""
    from boundary.core.config import dumps

    return dumps(settings)
