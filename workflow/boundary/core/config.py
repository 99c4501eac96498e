"""Config: load, fill every default and validate against the schema (core/schema.py), and the
cross-field rules a JSON schema cannot state: names, references, settings a run would not read.

Config values reach code only as validated config -> rule params -> CLI `--settings` JSON
(core/settings.py: each rule gets the settings its stage reads, so Snakemake's params rerun
exactly the stages a change invalidates).
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from boundary.core import schema, settings
from boundary.core.errors import BoundaryError
from boundary.core.names import GATED, RESERVED


def validate_config(config: dict) -> dict:
    """Return a validated copy with defaults filled; raise one line naming the bad field."""
    if not isinstance(config, dict):
        raise BoundaryError(f"config: must be a mapping of sections, not a {type(config).__name__}")
    raw = config
    config = copy.deepcopy(config)
    schema.check_finite(config, "config")
    for key in set(raw.get("train") or {}) & set(settings.REPLACED_TRAIN_KEYS):
        raise BoundaryError(f"config: train.{key}: {settings.REPLACED_TRAIN_KEYS[key]}")
    schema.fill_defaults(config, schema.load())
    error = schema.first_error(config)
    if error:
        raise BoundaryError(f"config: {schema.message(error)}")
    _check_names(config)
    _check_references(config)
    _check_settings_used(raw, config)
    # The report's settings the pipeline derives from the rest of the config, where the config's
    # `report:` section does not give them.
    config["report"] = {**config["report"], **settings.report_derived(config), **(raw.get("report") or {})}
    return config


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
    try:
        settings.check_batch_split(config["train"], max(1, config["train"]["gpus"]))
    except BoundaryError as err:
        raise BoundaryError(f"config: {err}") from None
    if config["train"]["sharding"] == "fsdp" and config["train"]["gpus"] == 0:
        raise BoundaryError("config: train.sharding: fsdp needs train.gpus >= 1 (accelerate runs FSDP on "
                            "GPUs only; on the CPU it would train unsharded)")
    stop, runtime = int(config["slurm"]["train_stop_seconds"]), config["resources"]["train"]["runtime"]
    if stop >= runtime * 60:
        raise BoundaryError(f"config: slurm.train_stop_seconds: {stop} s is not before the training job's time "
                            f"limit (resources.train.runtime: {runtime} min)")


# Keys a mask kind reads (training/gate.py): the schema's `x-read-with: {kind: ...}`.
MASK_KEYS = schema.read_with_values("masks", "kind")
# A method's knobs read only with a setting that the schema's `x-read-with` (one value, or one
# of a list) cannot state: key -> (is it read?, what reads it).
METHOD_KNOBS = {
    "masked_action": (lambda m: m.get("mask") is not None, "a mask"),
    "kl_estimator": (lambda m: m.get("anchor") == "policy" or m["beta_kl"] > 0,
                     "anchor: policy or beta_kl > 0"),
    "kl_value_every": (lambda m: m["kl_estimator"] == "k1" and (
        m.get("anchor") == "policy" or (m["beta_kl"] > 0 and m.get("anchor") in ("base", None))),
        "kl_estimator: k1 and only k1 terms on the base (anchor: policy, or beta_kl > 0 with anchor: base or none)"),
}
# What a checkpoint_of method reads: it evaluates another method's policy, trains nothing.
CHECKPOINT_KEYS = {"label", "seeds", "setting", "checkpoint_of", "step"}


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
    for section, given in raw.items():  # a section's keys read only with another (x-read-with)
        if section in ("methods", "masks") or not isinstance(given, dict):
            continue
        node = schema.ref(schema.load()["properties"].get(section, {}))
        for key in sorted(given):
            sub = schema.ref(node.get("properties", {}).get(key, {}))
            if not schema.is_read(sub, config[section]):
                raise BoundaryError(f"config: {section}.{key}: read only with "
                                    f"{schema.read_with_text(sub, section + '.')}")
    calibration = config["calibration"]
    if calibration["extend"] and calibration["adaptive"]:
        raise BoundaryError("config: calibration.extend: not with calibration.adaptive: true (an adaptive run "
                            "stops a prompt before n; extend a full calibration)")
    if calibration["extend"] and calibration["extend_to"] <= calibration["n"]:
        raise BoundaryError(f"config: calibration.extend_to: {calibration['extend_to']} must exceed "
                            f"calibration.n ({calibration['n']})")
    for section, switch in (("calibration", "adaptive"), ("evaluate", "sequential")):  # draws in rounds
        if config[section][switch] and config["sampling"]["backend"] != "hf":
            raise BoundaryError(f"config: {section}.{switch}: true needs sampling.backend: hf (vllm would "
                                "start its engine once per round, about 80-90 s each on a GPU)")
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
        anchoring = settings.anchoring(method["mask"] is not None, method["masked_action"])
        if method["anchor"] is not None and not anchoring:
            why = "has no mask" if method["mask"] is None else "drops its mask's prompts (masked_action: drop)"
            raise BoundaryError(f"{where}.anchor: only a mask's prompts are anchored, and this method "
                                f"{why}; it would train plain GRPO under its name")
        if anchoring and method["anchor"] is None:
            raise BoundaryError(f"{where}.anchor: required when a mask anchors prompts "
                                "(policy, base, support, forward_kl or js)")
        entry = schema.section("methods")["properties"]
        for key in sorted(given):
            read, reader = METHOD_KNOBS.get(key, (lambda m, sub=entry.get(key, {}): schema.is_read(sub, m),
                                                  schema.read_with_text(entry.get(key, {}))))
            if not read(method):
                raise BoundaryError(f"{where}.{key}: read only with {reader}, which this method does not set")


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
