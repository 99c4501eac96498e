"""The settings layer: from the validated config to what each stage is given, and from what a
stage is given to every value its code reads. Plain Python: the rules call it, and so do the
stages, the trainer's config, the report, the tests and the benchmarks.

Two functions a stage, one on each side of the `--settings` JSON:
- the key (`<stage>_key(config, ...)`): the dict the stage's rule hashes as its params, so
  Snakemake reruns exactly the stages a change invalidates. Its JSON is a finished run's
  identity (tests/test_settings.py holds the shipped configs' keys to a snapshot), and
  `boundary train` resumes only checkpoints made under the same key (stages/train.py).
- the complete settings (`resolve(stage, given)`; `load(stage, text)` for a `--settings`
  argument): the given dict checked against the stage's part of the schema, a bad one refused
  in one line naming the key, with every default filled. Code reads these and writes no
  default of its own (tests/test_settings.py checks).

The key rule, one for every stage (`key`): a stage's key holds every setting the stage reads,
at its value in the config with every default filled (the schema has one kind of default,
`default:`), so editing a default reruns the stages that read it. Two annotations of the schema
leave a setting out (core/schema.py):
- `x-off: V`, on a setting of an opt-in feature, V its default: at V the stage computes what
  it computed before the feature existed, and the setting stays out of the key. A new feature
  that is off by default so moves no existing run's key; switched on, it enters the keys of the
  stages that read it. A feature that is a section takes `x-off: {enabled: false}` (the whole
  section stays out while `enabled` is false) or is nullable with `default: null, x-off: null`.
- `x-read-with: {setting: V}`: read only while the setting beside it holds V (a list: one of);
  otherwise out of the key (and refused if a config gives it).
Out of a key besides, by its stage: what the stage does not read at all (evaluate.base_seeds
plans jobs; sampling.shards splits only evaluation and base rollouts).

`defaults(section)` reads the schema's defaults from schema_defaults.json beside this file, the
schema's own rendered as JSON (tests/test_settings.py keeps it equal): `boundary diagnose`
reads its defaults there, and runs without PyYAML or jsonschema (readers and analysis only).
Everything else here is the pipeline's and imports core.schema (PyYAML) when called.
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
# A method entry's keys that only name, schedule or point at other runs: not training settings.
METHOD_ONLY = ("label", "seeds", "setting", "checkpoint_of", "step")
# Train keys a later key replaced: refused in one line that names the replacement.
REPLACED_TRAIN_KEYS = {"use_vllm": "replaced by train.rollout_engine (generate | vllm; vllm: TRL's "
                                   "engine, colocated unless vllm_mode: server)"}
SPLITS = ("train", "diagnostic")
# The base's i-th evaluation samples at evaluate.seed + i * this prime, apart from shard offsets.
BASE_SEED_STRIDE = 104729


# ---- helpers the keys and the checks share ---------------------------------------------------

def refresh_epochs(steps: int, refresh_steps: int) -> int:
    """Gate refresh epochs of a run of `steps` steps: the last one may be cut short."""
    return math.ceil(steps / refresh_steps)


def anchoring(masked: bool, masked_action: str) -> bool:
    """Whether a method anchors prompts: it has a mask (that masks some prompt: `masked`) and
    gives masked prompts the anchor (masked_action: anchor), not drop. The config's checks,
    the rules, the report and the trainer all ask this one function."""
    return bool(masked) and masked_action == "anchor"


def check_batch_split(train: dict, processes: int) -> None:
    """Refuse in one line `processes` that cannot share a step's completions (prompts_per_step
    x num_generations) evenly: every process generates and trains as many, in
    gradient_accumulation_steps micro-batches. `train`: the train settings (complete). The
    config's check, `boundary train`'s before it starts processes, and make_config's all run this."""
    completions = int(train["prompts_per_step"]) * int(train["num_generations"])
    accumulation = int(train["gradient_accumulation_steps"])
    if completions % (accumulation * processes):
        raise BoundaryError(
            f"train.gpus: {processes} processes do not divide a step's prompts_per_step x "
            f"num_generations = {completions} completions"
            + (f" into {accumulation} accumulation steps each" if accumulation > 1 else "")
            + "; choose a count that divides it")


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


def method_settings(spec: dict) -> dict:
    """A `methods:` entry as its training run gets it: without METHOD_ONLY's keys, and without
    a null `lora` (null: train.lora's, which the run keeps)."""
    return {k: v for k, v in spec.items() if k not in METHOD_ONLY and not (k == "lora" and v is None)}


def sampling_key(config: dict, split: str, *, sharded: bool = True) -> dict:
    """Sampling and verification settings of a stage that samples `split`. sampling.shards
    splits evaluations and base rollouts into jobs; a stage it does not split (`sharded` False:
    the calibration, the gate's draws) holds it at 1, so that changing it between GPU sessions
    remakes neither."""
    sampling = config["sampling"] if sharded else {**config["sampling"], "shards": 1}
    return {"sampling": sampling, "verify": {**config["verify"], "extractor": extractor_of(config, split)}}


# ---- the keys: what each rule hashes --------------------------------------------------------

def key(stage: str, given: dict) -> dict:
    """The key rule (this module's docstring): `given`, a stage's settings drawn from the
    validated config, less the settings at their `x-off` value and those not read. The one
    place a key is made; `boundary train` keys its checkpoints with it too."""
    from boundary.core import schema

    return schema.keyed(given, stage_schema(stage))


def pretrain_key(config: dict) -> dict:
    return key("pretrain", {k: config["testbed"][k] for k in ("task", "model", "pretrain")})


def data_key(config: dict, split: str | None = None) -> dict:
    """The testbed's splits (one job, `split` unused) or one real split: that dataset alone."""
    if config["testbed"] is not None:
        return key("data", {"testbed": config["testbed"], "data": config["data"], "prompt": config["prompt"]})
    if split in SPLITS:
        data = {split: dataset_spec(config, split)}
    else:
        data = {"benchmarks": {split[len("bench_"):]: dataset_spec(config, split)}}
    return key("data", {"data": data, "prompt": config["prompt"]})


def calibrate_key(config: dict, split: str) -> dict:
    """The calibration section and the sampling; an adaptive run adds the regimes' cuts (its
    stopping rule reads them)."""
    given = {"calibration": config["calibration"], **sampling_key(config, split, sharded=False)}
    if config["calibration"]["adaptive"]:
        given["regimes"] = config["regimes"]
    return key("calibrate", given)


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
    return key("masks", spec)


def gate_draws_key(config: dict) -> dict:
    """One cache for every gated mask: the largest G0 any of them reads, every epoch."""
    sizes = [mask_key(config, m)["G0"] for m, s in config["masks"].items() if s["kind"] in GATED]
    gate = {k: config["gate"][k] for k in ("seed", "temperature", "top_p")}
    epochs = refresh_epochs(config["train"]["steps"], config["gate"]["refresh_steps"])
    return key("gate-draws", {"gate": {**gate, "G0": max(sizes + [config["gate"]["G0"]]), "epochs": epochs},
                              **sampling_key(config, "train", sharded=False)})


def regimes_key(config: dict) -> dict:
    return key("regimes", config["regimes"])


def train_key(config: dict, method: str) -> dict:
    """A trained method's settings (train section, its method entry, the derived keys); the
    base_rollouts stage gets the same."""
    derived = {name: config[section][k] for name, (section, k) in TRAIN_DERIVED.items()}
    derived["extractor"] = extractor_of(config, "train")
    method_keys = method_settings(config["methods"][method])
    # A method's own `lora:` section (null: train.lora's) replaces train.lora for its runs.
    lora = method_keys.pop("lora", None)
    train = {**config["train"], **({"lora": lora} if lora is not None else {})}
    return key("train", {**train, **derived, **method_keys})


def train_owns_gpus(config: dict) -> bool:
    """Whether a training job owns its GPUs (no other job beside it, core/gpus.py): a colocated
    vLLM engine sizes its memory from what it finds free while it starts, and stops when a
    neighbour frees memory meanwhile."""
    train = {**defaults("train"), **config["train"]}
    return train["rollout_engine"] == "vllm" and train["vllm_mode"] == "colocate"


def base_seeds(config: dict) -> int:
    """The base's evaluations of each benchmark (evaluate.base_seeds: it plans jobs, and no
    evaluation reads it)."""
    return config["evaluate"]["base_seeds"]


def evaluate_key(config: dict, bench: str, method: str, seed: int) -> dict:
    """One (method, seed)'s evaluation: the base's i-th draw samples at its own seed; every
    policy at evaluate.seed (common random numbers across policies). base_seeds is left out:
    the stage does not read it."""
    evaluate = {k: v for k, v in config["evaluate"].items() if k != "base_seeds"}
    if method == BASE and seed:
        evaluate["seed"] += BASE_SEED_STRIDE * seed
    return key("evaluate", {"evaluate": evaluate, **sampling_key(config, bench)})


def report_derived(config: dict) -> dict:
    """The report settings the pipeline derives from the rest of a config (filled): validation
    puts them in the config's `report:` section where it does not give them."""
    methods, masks = config["methods"], config["masks"]
    ablation_masks = {m for m, s in masks.items() if s["kind"] in ("gate", "soft")}
    pba_mask = methods.get("pba", {}).get("mask")
    return {
        "labels": {m: s.get("label", m) for m, s in methods.items()},
        "benchmarks": {b: b for b in benchmarks(config)},
        "ks": config["evaluate"]["ks"],
        "controls": [{"method": m, "label": s.get("label", m), "setting": s["setting"]}
                     for m, s in methods.items() if "setting" in s],
        "ablations": [
            {"method": m, "mask": s["mask"], "G0": mask_key(config, s["mask"])["G0"],
             "tau": mask_key(config, s["mask"])["tau"], "kind": masks[s["mask"]]["kind"]}
            for m, s in methods.items()
            if s["mask"] in ablation_masks and anchoring(True, s["masked_action"])
            and (m == "pba" or s["mask"] != pba_mask)
        ],
        "ranked": list(methods),
        "group_size": config["train"]["num_generations"],
        "gate_G0": config["gate"]["G0"],
    }


def report_key(config: dict) -> dict:
    """The report's complete settings (its key is the whole of them): the config's `report:`
    section, derived keys included (report_derived)."""
    try:
        return key("report", resolve("report", config["report"]))
    except BoundaryError as err:
        raise BoundaryError(f"config: {err}") from None


# ---- the complete settings: what the code reads ----------------------------------------------

def _object(properties: dict, required=()) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": properties,
            "required": list(required)}


@functools.cache
def stage_schema(stage: str) -> dict:
    """The JSON schema of a stage's `--settings`, made of the config schema's sections."""
    from boundary.core.schema import load, section

    if stage == "pretrain":
        parts = {k: section(f"testbed.{k}") for k in ("task", "model", "pretrain")}
        node = _object(parts, parts)
    elif stage == "data":
        data = section("data")
        data.pop("required")  # a real split's job gets its own dataset alone
        node = _object({"testbed": section("testbed"), "data": data, "prompt": section("prompt")}, ["prompt"])
    elif stage in ("calibrate", "evaluate"):  # a stage that samples: its section, sampling, verify
        own = "calibration" if stage == "calibrate" else "evaluate"
        node = _object({own: section(own), "sampling": section("sampling"), "verify": section("verify")}, [own])
        if stage == "calibrate":  # an adaptive calibration's stopping rule reads the regimes' cuts
            node["properties"]["regimes"] = section("regimes")
    elif stage == "gate-draws":
        gate = section("gate")
        gate["properties"]["epochs"] = {"$ref": "#/definitions/posint"}
        gate["required"] = ["epochs"]
        node = _object({"gate": gate, "sampling": section("sampling"), "verify": section("verify")}, ["gate"])
    elif stage == "regimes":
        node = section("regimes")
    elif stage == "masks":
        node = section("masks")
        node["properties"]["epochs"] = {"$ref": "#/definitions/posint"}
        node["properties"]["share_of_settings"] = {"type": "object"}  # the named mask's key (mask_key)
        node["required"] = ["kind", "epochs"]
    elif stage in ("train", "base-rollouts"):
        train, method = section("train"), section("methods")
        derived = {name: section(part)["properties"][k] for name, (part, k) in TRAIN_DERIVED.items()}
        # A method's `lora` replaces train.lora (train_key): the stage reads train.lora's schema.
        own = {k: v for k, v in method["properties"].items() if k not in METHOD_ONLY and k != "lora"}
        node = _object({**train["properties"], **own, **derived}, TRAIN_REQUIRED)
    elif stage == "report":
        node = section("report")
    else:
        raise KeyError(stage)
    return {"definitions": load()["definitions"], **node}


def resolve(stage: str, given: dict) -> dict:
    """A stage's complete settings: `given` checked against the stage's schema (one line naming
    the first bad key), every unset key at the schema's default."""
    from boundary.core import schema

    if not isinstance(given, dict):
        raise BoundaryError(f"{stage} settings: must be a JSON object, not {type(given).__name__}")
    if stage in ("train", "base-rollouts"):
        for name in sorted(set(given) & set(REPLACED_TRAIN_KEYS)):
            raise BoundaryError(f"{stage} settings: {name}: {REPLACED_TRAIN_KEYS[name]}")
    node = stage_schema(stage)
    settings = copy.deepcopy(given)
    mask_keys = schema.read_with_values("masks", "kind")
    if stage == "masks" and settings.get("kind") in mask_keys:  # each kind's own keys only
        kind = settings["kind"]
        own = mask_keys[kind] | {"kind", "epochs"} | ({"share_of_settings"} if "share_of" in settings else set())
        unread = sorted(set(settings) - own)
        if unread:
            raise BoundaryError(f"{stage} settings: {unread[0]}: not read by a {kind} mask")
        if kind == "random" and ("fraction" in settings) == ("share_of" in settings):
            raise BoundaryError(f"{stage} settings: a random mask takes fraction or share_of, one of the two")
        node = {**node, "required": sorted(own - {"confidence", "fraction", "share_of"}),
                "properties": {k: v for k, v in node["properties"].items() if k in own}}
        if isinstance(settings.get("share_of_settings"), dict):  # the named mask's, complete
            settings["share_of_settings"] = resolve(stage, settings["share_of_settings"])
    schema.fill_defaults(settings, node)
    error = schema.first_error(settings, node)
    if error:
        raise BoundaryError(f"{stage} settings: {schema.message(error)}")
    if stage == "calibrate" and settings["calibration"]["adaptive"] and "regimes" not in settings:
        raise BoundaryError(f"{stage} settings: regimes: missing (calibration.adaptive reads its cuts)")
    if stage == "report":
        if not settings["main"]:
            settings["main"] = [settings["baseline"], settings["method"]]
        if not settings["headline"] and settings["benchmarks"]:
            settings["headline"] = next(iter(settings["benchmarks"]))
    return settings


def read(value: str) -> dict:
    """The settings a `--settings` gives (JSON text, or a path to a JSON file), as given: not
    resolved. One line for a missing file, bad JSON or a non-finite number."""
    from boundary.core import schema

    text_ = value
    if not value.lstrip().startswith("{"):
        path = Path(value)
        if not path.exists():
            raise BoundaryError(f"--settings: {value}: not JSON and no such file")
        text_ = path.read_text()
    try:
        given = json.loads(text_)
    except json.JSONDecodeError as err:
        raise BoundaryError(f"--settings: invalid JSON ({err.msg})") from None
    schema.check_finite(given, "--settings")  # Python's json reads NaN and Infinity, which JSON has not
    return given


def load(stage: str, value: str) -> dict:
    """A stage's complete settings from its `--settings` (JSON text or a file)."""
    try:
        return resolve(stage, read(value))
    except BoundaryError as err:
        message = str(err)
        raise BoundaryError(message if message.startswith("--settings") else f"--settings: {message}") from None


@functools.cache
def _defaults() -> dict:
    return json.loads(DEFAULTS_PATH.read_text())


def defaults(section: str) -> dict:
    """The schema's defaults of a config section (`methods` and `masks`: of one entry), from
    schema_defaults.json."""
    return copy.deepcopy(_defaults()[section])


def rendered_defaults() -> str:
    """schema_defaults.json as the schema gives it (PyYAML): `write_defaults` writes it."""
    from boundary.core import schema

    root = schema.load()
    sections = [k for k, v in root["properties"].items() if "properties" in v or k in ("methods", "masks")]
    sections += [f"testbed.{k}" for k in ("task", "model", "pretrain")] + ["train.lora"]
    lines = [f"{json.dumps(s)}: {json.dumps(schema.defaults(s), sort_keys=True)}" for s in sorted(sections)]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_defaults() -> None:
    """Render the schema's defaults into schema_defaults.json (after editing the schema)."""
    DEFAULTS_PATH.write_text(rendered_defaults())
    _defaults.cache_clear()


def text(settings: dict) -> str:
    """The one serialisation of settings (sorted keys): what a rule passes and hashes."""
    return json.dumps(settings, sort_keys=True, separators=(",", ":"))
