"""Config: load, fill defaults and validate against the JSON schema; per-stage settings.

Config values reach code only as validated config -> rule params -> CLI `--settings` JSON.
Each rule gets only the values that affect it, serialised with sorted keys, so Snakemake's
params trigger reruns exactly the stages a change invalidates.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from pathlib import Path

import yaml

from boundary.core.errors import BoundaryError
from boundary.core.names import GATED, RESERVED

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


@functools.cache
def _schema_text() -> str:
    return SCHEMA_PATH.read_text()


@functools.cache
def _schema() -> dict:
    """The schema, parsed once (read only: callers copy what they change)."""
    return yaml.safe_load(_schema_text())


def _resolve(sub: dict, root: dict) -> dict:
    ref = sub.get("$ref", "")
    if not ref:
        return sub
    return {**root["definitions"][ref.rsplit("/", 1)[-1]], **sub}  # local keys win


def _is_object(schema: dict) -> bool:
    """An object schema, nullable ones (`type: [object, "null"]`) included."""
    kind = schema.get("type")
    return kind == "object" or isinstance(kind, list) and "object" in kind


def _fill_defaults(node: dict, schema: dict, root: dict | None = None, words=("default",)) -> None:
    """Fill the schema's `default:` values (and with `words`, `x-default:` ones) into the
    config, recursively (objects only)."""
    root = root or schema
    for key, sub in schema.get("properties", {}).items():
        sub = _resolve(sub, root)
        for word in words:
            if key not in node and word in sub:
                node[key] = copy.deepcopy(sub[word])
        if isinstance(node.get(key), dict) and _is_object(sub):
            _fill_defaults(node[key], sub, root, words)
    extra = schema.get("additionalProperties")
    extra = _resolve(extra, root) if isinstance(extra, dict) else None
    if extra and _is_object(extra):
        for key, value in node.items():
            if key not in schema.get("properties", {}) and isinstance(value, dict):
                _fill_defaults(value, extra, root, words)


def _where(error) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


def _validator(schema: dict | None = None):
    """Draft 7, except that an integer is an int: JSON schema takes 32.0 for 32, and a count
    or seed written as a float would crash a stage only after every upstream one has run."""
    import jsonschema

    def is_integer(checker, value):
        return isinstance(value, int) and not isinstance(value, bool)

    checker = jsonschema.Draft7Validator.TYPE_CHECKER.redefine("integer", is_integer)
    return jsonschema.validators.extend(jsonschema.Draft7Validator, type_checker=checker)(schema or _schema())


def _message(err) -> str:
    """One line for the first schema error, naming the field."""
    where = _where(err)
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        field = f"{where}.{extra[0]}" if where != "<top level>" else extra[0]
        return f"unknown key {field!r}"
    if "propertyNames" in err.schema_path:  # a name of a method, mask or benchmark
        name = err.instance
        what = "a blank name" if not str(name).strip() else f"name {name!r}"
        return (f"{where}: {what}: names hold only letters, digits and _ (they become folder, "
                "file and rule names)")
    return f"{where}: {err.message}"


def validate_config(config: dict) -> dict:
    """Return a validated copy with defaults filled; raise one line naming the bad field."""
    if not isinstance(config, dict):
        raise BoundaryError(f"config: must be a mapping of sections, not a {type(config).__name__}")
    raw = config
    config = copy.deepcopy(config)
    _check_finite(config)
    for key in set(raw.get("train") or {}) & set(REPLACED_TRAIN_KEYS):
        raise BoundaryError(f"config: train.{key}: {REPLACED_TRAIN_KEYS[key]}")
    _fill_defaults(config, _schema())
    errors = sorted(_validator().iter_errors(config), key=lambda e: (len(list(e.absolute_path)), _where(e)))
    if errors:
        raise BoundaryError(f"config: {_message(errors[0])}")
    _check_names(config)
    _check_references(config)
    _check_settings_used(raw, config)
    return config


def _check_finite(node, where: str = "") -> None:
    """No NaN or infinity anywhere: JSON schema bounds let them through (every comparison with
    NaN is false), and a NaN temperature or rate gives numbers without a word."""
    if isinstance(node, float) and not math.isfinite(node):
        text = ".nan" if math.isnan(node) else ".inf" if node > 0 else "-.inf"
        raise BoundaryError(f"config: {where or '<top level>'}: {text} is not a finite number")
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        _check_finite(value, f"{where}.{key}" if where else str(key))


def _check_names(config: dict) -> None:
    """Names the pipeline uses itself (core/names.py) are not a config's to take."""
    for section, reserved in RESERVED.items():
        node = config
        for key in section.split("."):
            node = (node or {}).get(key) or {}
        for name in node:
            if name in reserved:
                raise BoundaryError(f"config: {section}.{name}: a name the pipeline uses itself "
                                    f"({reserved[name]}); choose another")


def _check_references(config: dict) -> None:
    """Cross-field rules a JSON schema cannot state."""
    masks = config["masks"]
    for name, method in config["methods"].items():
        if method.get("mask") and method["mask"] not in masks:
            raise BoundaryError(f"config: methods.{name}.mask: no mask named {method['mask']!r}")
        source = method.get("checkpoint_of")
        if source is not None:
            if source not in config["methods"] or config["methods"][source].get("checkpoint_of"):
                raise BoundaryError(f"config: methods.{name}.checkpoint_of: "
                                    f"{source!r} is not a trained method")
            if method.get("step") not in config["train"]["checkpoints"]:
                raise BoundaryError(f"config: methods.{name}.step: must be one of "
                                    f"train.checkpoints {config['train']['checkpoints']}")
    if config.get("testbed") is None and config.get("base_model") is None:
        raise BoundaryError("config: base_model: required when there is no testbed section")
    if config.get("testbed") is None and not config.get("data"):
        raise BoundaryError("config: data: required when there is no testbed section")
    if max(config["evaluate"]["ks"]) > config["evaluate"]["n"]:
        raise BoundaryError("config: evaluate.ks: every k must be <= evaluate.n")
    if any(step > config["train"]["steps"] for step in config["train"].get("checkpoints", [])):
        raise BoundaryError("config: train.checkpoints: every step must be <= train.steps")
    regimes = config["regimes"]
    if regimes["boundary"] > regimes["easy"]:  # filled: every regimes key has a default
        raise BoundaryError("config: regimes: boundary must be <= easy")
    if regimes["coverage_min"] >= 1:
        raise BoundaryError("config: regimes.coverage_min: must be < 1")
    if "{problem}" not in config["prompt"]["template"]:
        raise BoundaryError("config: prompt.template: must contain {problem}")
    train, accum = config["train"], schema_defaults("train")["gradient_accumulation_steps"]
    why = batch_split_error(train["prompts_per_step"] * train["num_generations"],
                            train.get("gradient_accumulation_steps", accum), max(1, train["gpus"]))
    if why:
        raise BoundaryError(f"config: {why}")
    if train.get("sharding") == "fsdp" and train["gpus"] == 0:
        raise BoundaryError("config: train.sharding: fsdp needs train.gpus >= 1 (accelerate runs FSDP on "
                            "GPUs only; on the CPU it would train unsharded)")
    stop, runtime = config["slurm"]["train_stop_seconds"], config["resources"]["train"]["runtime"]
    if stop >= runtime * 60:
        raise BoundaryError(f"config: slurm.train_stop_seconds: {stop} s is not before the training job's time "
                            f"limit (resources.train.runtime: {runtime} min)")


# Keys a mask kind reads (training/gate.py); any other is ignored by that kind.
MASK_KEYS = {"gate": {"G0", "tau"}, "solved": {"G0", "tau"}, "soft": {"G0", "tau", "confidence"},
             "random": {"fraction", "share_of", "seed"}, "oracle": set()}
# A method's knobs that only one setting reads: key -> (is it read?, what reads it).
METHOD_KNOBS = {
    "support_floor": (lambda m: m.get("anchor") == "support", "anchor: support"),
    "passk_k": (lambda m: m.get("advantage") == "passk", "advantage: passk"),
    "positive_weight": (lambda m: m.get("advantage") == "reinforce", "advantage: reinforce"),
    "negative_weight": (lambda m: m.get("advantage") == "reinforce", "advantage: reinforce"),
    "cov_fraction": (lambda m: m.get("cov_select") is not None, "cov_select"),
    "cov_bounds": (lambda m: m.get("cov_select") == "clip", "cov_select: clip"),
    "cov_kl_coef": (lambda m: m.get("cov_select") == "kl", "cov_select: kl"),
    "beta_a": (lambda m: m.get("anchor") is not None, "an anchor"),
    "masked_action": (lambda m: m.get("mask") is not None, "a mask"),
    "kl_estimator": (lambda m: m.get("anchor") == "policy" or m["beta_kl"] > 0,
                     "anchor: policy or beta_kl > 0"),
}
# What a checkpoint_of method reads: it evaluates another method's policy, trains nothing.
CHECKPOINT_KEYS = {"label", "seeds", "setting", "checkpoint_of", "step"}


# Train keys a later key replaced: refused in one line that names the replacement.
REPLACED_TRAIN_KEYS = {"use_vllm": "replaced by train.rollout_engine (generate | vllm; vllm: TRL's "
                                   "engine, colocated unless vllm_mode: server)"}


def _check_random_mask(name: str, spec: dict, masks: dict) -> None:
    """A random mask: a seed, and its share as a fraction or as a gated mask's (share_of)."""
    where = f"config: masks.{name}"
    if "seed" not in spec:
        raise BoundaryError(f"{where}.seed: required by a random mask")
    if ("fraction" in spec) == ("share_of" in spec):
        raise BoundaryError(f"{where}: give fraction or share_of (a gate mask's name: its protected share), "
                            "one of the two")
    ref = spec.get("share_of")
    if ref is not None and (masks.get(ref) or {}).get("kind") not in GATED:
        raise BoundaryError(f"{where}.share_of: {ref!r} is not a gate, soft or solved mask of this config")


def _check_settings_used(raw: dict, config: dict) -> None:
    """A key a config gives but the run would not read is one line, never ignored silently."""
    if config.get("testbed") is not None:
        for key in ("base_model", "data", "arithmetic"):
            if raw.get(key) is not None:
                raise BoundaryError(f"config: {key}: not used with a testbed section (the testbed "
                                    "pretrains its own base on its own prompts); remove one of the two")
    if (raw.get("prompt") or {}).get("system") is not None and not config["prompt"]["chat"]:
        raise BoundaryError("config: prompt.system: read only with prompt.chat: true (the chat template "
                            "places it)")
    unread = sorted({"rounds", "delta"} & set(raw.get("calibration") or {}))
    if unread and not config["calibration"]["adaptive"]:
        raise BoundaryError(f"config: calibration.{unread[0]}: read only with calibration.adaptive: true")
    if config["calibration"]["adaptive"] and config["sampling"]["backend"] != "hf":
        raise BoundaryError("config: calibration.adaptive: true needs sampling.backend: hf (vllm would "
                            "start its engine once per round, about 80-90 s each on a GPU)")
    vllm = sorted(k for k in raw.get("train") or {} if k.startswith("vllm_"))
    if vllm and config["train"].get("rollout_engine") != "vllm":
        raise BoundaryError(f"config: train.{vllm[0]}: read only with train.rollout_engine: vllm")
    for name, spec in (raw.get("masks") or {}).items():
        kind = spec.get("kind")
        unread = sorted(set(spec) - {"kind"} - MASK_KEYS.get(kind, set(spec)))
        if unread:
            raise BoundaryError(f"config: masks.{name}.{unread[0]}: not read by a {kind} mask "
                                f"(it reads {', '.join(sorted(MASK_KEYS[kind])) or 'no other key'})")
        if kind == "random":
            _check_random_mask(name, spec, raw["masks"])
    for name, given in (raw.get("methods") or {}).items():
        method, where = config["methods"][name], f"config: methods.{name}"
        if method["checkpoint_of"] is not None:
            unread = sorted(set(given) - CHECKPOINT_KEYS)
            if unread:
                raise BoundaryError(f"{where}.{unread[0]}: not used by a checkpoint_of method (it "
                                    f"evaluates {method['checkpoint_of']}'s policy; set it there)")
            continue
        if given.get("step") is not None:
            raise BoundaryError(f"{where}.step: used only with checkpoint_of")
        anchoring = method["mask"] is not None and method["masked_action"] == "anchor"
        if method["anchor"] is not None and not anchoring:
            why = "has no mask" if method["mask"] is None else "drops its mask's prompts (masked_action: drop)"
            raise BoundaryError(f"{where}.anchor: only a mask's prompts are anchored, and this method "
                                f"{why}; it would train plain GRPO under its name")
        if anchoring and method["anchor"] is None:
            raise BoundaryError(f"{where}.anchor: required when a mask anchors prompts "
                                "(policy, base, support, forward_kl or js)")
        for key, (read, reader) in METHOD_KNOBS.items():
            if key in given and not read(method):
                raise BoundaryError(f"{where}.{key}: read only with {reader}, which this method does not set")


def batch_split_error(completions: int, accumulation: int, processes: int) -> str | None:
    """Why `processes` cannot share a step's `completions` evenly (every process generates and
    trains as many, in `accumulation` micro-batches), or None."""
    if completions % (accumulation * processes):
        return (f"train.gpus: {processes} processes do not divide a step's prompts_per_step x "
                f"num_generations = {completions} completions"
                + (f" into {accumulation} accumulation steps each" if accumulation > 1 else "")
                + "; choose a count that divides it")
    return None


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML that refuses a key given twice in one mapping (PyYAML silently keeps the last)."""


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key, line: int):
        super().__init__(f"line {line}: duplicate key {key!r}")


def _unique_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may be overridden
            continue
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise _DuplicateKey(key, key_node.start_mark.line + 1)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_yaml(path: str | Path) -> dict:
    """A config file's mapping; a missing file, bad YAML or a duplicate key is one line."""
    path = Path(path)
    if not path.exists():
        raise BoundaryError(f"{path}: config file not found")
    if not path.is_file():
        raise BoundaryError(f"{path}: is not a file (give a YAML config file)")
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except _DuplicateKey as err:
        raise BoundaryError(f"{path}: {err}") from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        tab = " (a tab in the indentation: indent with spaces)" if "'\\t'" in str(err) else ""
        raise BoundaryError(f"{path}: not valid YAML{line}{tab} ({err.__class__.__name__})") from None
    except UnicodeDecodeError as err:
        raise BoundaryError(f"{path}: not a text file (byte {err.start} is not UTF-8)") from None
    except OSError as err:
        raise BoundaryError(f"{path}: cannot be read ({err.strerror or err.__class__.__name__})") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BoundaryError(f"{path}: the config must be a mapping of sections, not a {type(raw).__name__}")
    return raw


def data_files(config: dict) -> list[tuple[str, str]]:
    """(config key, path) of every data file a validated config reads."""
    data = config.get("data") or {}
    found = [(f"data.{split}.path", data[split]["path"]) for split in ("train", "diagnostic") if data.get(split)]
    return found + [(f"data.benchmarks.{name}.path", spec["path"])
                    for name, spec in (data.get("benchmarks") or {}).items()]


def check_data_files(config: dict, generated=()) -> None:
    """Every data file the run reads exists (those a rule of the run writes, `generated`,
    aside): checked when the workflow starts, before any job, one line naming the key."""
    for key, path in data_files(config):
        if path not in set(map(str, generated)) and not Path(path).exists():
            raise BoundaryError(f"{key}: {path}: file not found (a relative path is read from "
                                f"the folder Snakemake runs in, {Path.cwd()})")


def load_config(path: str | Path) -> dict:
    return validate_config(load_yaml(path))


def _merged(base: dict, update: dict) -> dict:
    """Snakemake's merge of several --configfile values: nested mappings updated key by key."""
    out = dict(base)
    for key, value in update.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def make_parser_check_config():
    from boundary.core.options import ArgumentParser

    parser = ArgumentParser(prog="boundary check-config",
                            description="Check config files as the workflow would (their --configfile "
                                        "values, merged in order): one line naming the file and the key "
                                        "at fault, or 'valid'.",
                            epilog="example:\n  boundary check-config config/smollm2.yaml")
    parser.add_argument("configfile", nargs="+", help="config files, merged in order as --configfile merges them")
    return parser


def main_check_config(argv=None) -> None:
    """`boundary check-config FILE...`: the --configfile values, checked as the workflow would
    check them. Snakemake reads --configfile itself before the workflow starts, and names no
    file for a missing, binary or tab-indented one; run.sh calls this first."""
    args = make_parser_check_config().parse_args(argv)
    merged: dict = {}
    for path in args.configfile:
        merged = _merged(merged, load_yaml(path))
    try:
        validate_config(merged)
    except BoundaryError as err:
        raise BoundaryError(f"{', '.join(args.configfile)}: {err}") from None
    print(f"{', '.join(args.configfile)}: valid")


def method_settings(spec: dict) -> dict:
    """A `methods:` entry as its training run gets it: without the keys that only name,
    schedule or point at other runs (label, seeds, setting, checkpoint_of, step)."""
    return {k: v for k, v in spec.items() if k not in ("label", "seeds", "setting", "checkpoint_of", "step")}


def dumps(settings) -> str:
    """The one serialisation of settings: sorted keys, so equal settings print equally."""
    return json.dumps(settings, sort_keys=True, separators=(",", ":"))


def load_stage_settings(value: str) -> dict:
    """Settings from a JSON string (what rules pass) or a path to a JSON file."""
    text = value
    if not value.lstrip().startswith("{"):
        path = Path(value)
        if not path.exists():
            raise BoundaryError(f"--settings: {value}: not JSON and no such file")
        text = path.read_text()
    try:
        settings = json.loads(text)
    except json.JSONDecodeError as err:
        raise BoundaryError(f"--settings: invalid JSON ({err.msg})") from None
    try:
        _check_finite(settings)  # Python's json reads NaN and Infinity, which JSON has not
    except BoundaryError as err:
        raise BoundaryError(f"--settings: {str(err).removeprefix('config: ')}") from None
    return settings


def schema_defaults(section: str) -> dict:
    """The defaults the schema gives a section's keys (`methods` means one method entry):
    `default:` values, which validation fills into the config, and `x-default:` values, which
    it leaves unset so a method's settings (and its training key) don't change when another
    method gains a knob. Code reads them through core.settings.defaults (rendered as JSON).
    A dotted section is a nested one ("testbed.task")."""
    schema = _schema()
    node = schema
    for key in section.split("."):
        node = _resolve(node["properties"][key], schema)
    if section in ("methods", "masks"):
        node = node["additionalProperties"]
    out = {}
    for key, sub in node.get("properties", {}).items():
        sub = _resolve(sub, schema)
        for word in ("default", "x-default"):
            if word in sub:
                out[key] = copy.deepcopy(sub[word])
    return out


def schema_keys(section: str) -> set[str]:
    """Every key the schema allows in a section (`methods`: in one method entry)."""
    schema = _schema()
    node = _resolve(schema["properties"][section], schema)
    if section == "methods":
        node = node["additionalProperties"]
    return set(node.get("properties", {}))
