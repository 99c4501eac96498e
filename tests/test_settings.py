"""The settings layer (core/settings.py): each stage's key is what finished runs were hashed
with, a bad `--settings` is one line naming the key, and no default is written outside the
schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from boundary.core import schema, settings
from boundary.core.config import load_config
from boundary.core.errors import BoundaryError
from boundary.core.names import BASE, DIAGNOSTIC

ROOT = Path(__file__).resolve().parents[1]
# Every stage key of these configs, byte for byte: a change here reruns every finished run of
# them, so it is made on purpose and named in docs/how-to/upgrade.md (`snakemake --touch` keeps
# finished runs). Last moved when every setting a stage reads entered its key (one kind of
# default): every training run's key, and the sampling stages' of vllm-backend configs.
SNAPSHOT = ROOT / "tests" / "fixtures" / "stage_keys.json"


def stage_keys(config: dict) -> dict[str, str]:
    """Every key a run of `config` hashes, by stage (and split, mask, method or benchmark)."""
    keys, benchmarks = {}, settings.benchmarks(config)
    if config["testbed"] is not None:
        keys["pretrain"] = settings.text(settings.pretrain_key(config))
        keys["data"] = settings.text(settings.data_key(config))
    else:
        for split in ["train", "diagnostic"] + [f"bench_{b}" for b in benchmarks]:
            keys[f"data/{split}"] = settings.text(settings.data_key(config, split))
    for part, split in {"": "diagnostic", "_train": "train"}.items():
        keys[f"calibrate{part}"] = settings.text(settings.calibrate_key(config, split))
    keys["gate-draws"] = settings.text(settings.gate_draws_key(config))
    keys["regimes"] = settings.text(settings.regimes_key(config))
    for mask in config["masks"]:
        keys[f"masks/{mask}"] = settings.text(settings.mask_key(config, mask))
    for method, spec in config["methods"].items():
        if not spec["checkpoint_of"]:
            keys[f"train/{method}"] = settings.text(settings.train_key(config, method))
    for bench in [DIAGNOSTIC] + benchmarks:  # every policy's is the base's first draw's
        keys[f"evaluate/{bench}"] = settings.text(settings.evaluate_key(config, bench, BASE, 0))
        for seed in range(1, settings.base_seeds(config)):
            keys[f"evaluate/{bench}/base/seed{seed}"] = settings.text(settings.evaluate_key(config, bench, BASE, seed))
    keys["report"] = settings.text(settings.report_key(config))
    return keys


@pytest.mark.parametrize("name", sorted(json.loads(SNAPSHOT.read_text())))
def test_every_stage_key_is_the_one_finished_runs_were_hashed_with(name):
    expected = json.loads(SNAPSHOT.read_text())[name]
    assert stage_keys(load_config(ROOT / name)) == expected


@pytest.mark.parametrize("path", [*sorted((ROOT / "config").glob("*.yaml")),
                                  *sorted((ROOT / "tests" / "configs").glob("*.yaml"))], ids=lambda p: p.name)
def test_every_key_resolves_to_complete_settings(path):
    """What a rule passes is what its stage accepts, and resolving is idempotent."""
    config = load_config(path)
    stages = {"gate-draws": settings.gate_draws_key(config), "regimes": settings.regimes_key(config),
              "report": settings.report_key(config)}
    if config["testbed"] is not None:
        stages["pretrain"] = settings.pretrain_key(config)
        stages["data"] = settings.data_key(config)
    else:
        stages["data"] = settings.data_key(config, "train")
    stages["calibrate"] = settings.calibrate_key(config, "diagnostic")
    stages["evaluate"] = settings.evaluate_key(config, DIAGNOSTIC, BASE, settings.base_seeds(config) - 1)
    for stage, key in stages.items():
        full = settings.resolve(stage, key)
        assert settings.resolve(stage, full) == full, stage
    for mask in config["masks"]:
        full = settings.resolve("masks", settings.mask_key(config, mask))
        assert settings.resolve("masks", full) == full
    for method, spec in config["methods"].items():
        if not spec["checkpoint_of"]:
            full = settings.resolve("train", settings.train_key(config, method))
            assert set(settings.defaults("methods")) - set(settings.METHOD_ONLY) <= set(full)


def test_a_stage_s_complete_settings_give_back_its_key():
    """`boundary train` keys its checkpoints by key("train", complete settings): the rule's key,
    so a run resumes exactly the checkpoints made under the settings it trains with."""
    for name in json.loads(SNAPSHOT.read_text()):
        config = load_config(ROOT / name)
        for method, spec in config["methods"].items():
            if not spec["checkpoint_of"]:
                given = settings.train_key(config, method)
                assert settings.key("train", settings.resolve("train", given)) == given, (name, method)
        for mask in config["masks"]:
            given = settings.mask_key(config, mask)
            assert settings.key("masks", settings.resolve("masks", given)) == given
        given = settings.calibrate_key(config, DIAGNOSTIC)
        assert settings.key("calibrate", settings.resolve("calibrate", given)) == given


def _schema_nodes(node, path=""):
    """(path, node) of every setting in the schema, nested ones included."""
    for key, sub in (node.get("properties") or {}).items():
        yield f"{path}{key}", sub, node
        yield from _schema_nodes(schema.ref(sub), f"{path}{key}.")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        yield from _schema_nodes(schema.ref(extra), f"{path}<name>.")


def test_the_key_rule_s_annotations_are_well_formed():
    """x-off is the default (a key leaves out only what refilling gives back), and x-read-with
    names a setting beside it, with values that setting allows."""
    root = schema.load()
    for path, sub, parent in _schema_nodes({"properties": root["properties"]}):
        sub = schema.ref(sub)
        if "x-off" in sub:
            assert "default" in sub and schema.is_off(sub["default"], sub), path
        for other, want in sub.get("x-read-with", {}).items():
            assert other in parent["properties"], path
            beside = schema.ref(parent["properties"][other])
            for value in want if isinstance(want, list) else [want]:
                assert value in beside.get("enum", [value]) and not schema.first_error(value, {
                    **beside, "definitions": root["definitions"]}), (path, value)


def _edited_schema(monkeypatch, edit):
    """The settings layer on a copy of the schema that `edit` changed."""
    import copy as copy_

    edited = copy_.deepcopy(schema.load())
    edit(edited)
    monkeypatch.setattr(schema, "load", lambda: edited)
    settings.stage_schema.cache_clear()
    monkeypatch.setattr(settings.stage_schema, "cache_clear", settings.stage_schema.cache_clear)
    return edited


@pytest.fixture
def fresh_stage_schemas():
    settings.stage_schema.cache_clear()
    yield
    settings.stage_schema.cache_clear()


def _moved(before: dict, after: dict) -> list[str]:
    return sorted(f"{name}:{k}" for name in before for k in before[name] if before[name][k] != after[name][k])


def _snapshot_keys() -> dict:
    return {name: stage_keys(load_config(ROOT / name)) for name in json.loads(SNAPSHOT.read_text())}


def test_a_feature_off_by_default_moves_no_key_and_on_moves_the_stages_that_read_it(monkeypatch, fresh_stage_schemas):
    """New features as sections or switches, off by default (x-off), as LoRA training and
    sequential evaluation add them: no shipped config's key moves; switched on, only the
    keys of the stages that read them do."""
    before = _snapshot_keys()

    def add(root):
        root["properties"]["train"]["properties"]["adapter"] = {
            "type": "object", "default": {}, "x-off": {"enabled": False}, "additionalProperties": False,
            "properties": {"enabled": {"type": "boolean", "default": False},
                           "rank": {"$ref": "#/definitions/posint", "default": 16}}}
        root["properties"]["evaluate"]["properties"]["early_exit"] = {"type": "boolean", "default": False,
                                                                      "x-off": False}
        root["properties"]["evaluate"]["properties"]["block"] = {
            "$ref": "#/definitions/posint", "default": 32, "x-read-with": {"early_exit": True}}

    _edited_schema(monkeypatch, add)
    assert _moved(before, _snapshot_keys()) == []
    config = load_config(ROOT / "tests" / "configs" / "smoke.yaml")
    assert "adapter" not in settings.train_key(config, "grpo")
    config["train"]["adapter"]["enabled"] = True
    assert settings.train_key(config, "grpo")["adapter"] == {"enabled": True, "rank": 16}
    config["evaluate"]["early_exit"] = True
    assert settings.evaluate_key(config, DIAGNOSTIC, BASE, 0)["evaluate"]["block"] == 32


@pytest.mark.parametrize("section, name, value, moved", [
    ("train", "weight_decay", 0.01, "train/"),  # every training run reads it
    ("methods", "passk_k", 8, None),  # no shipped method trains with the pass@k advantage
    ("calibration", "rounds", [8, 256], None),  # read only by an adaptive calibration
    ("sampling", "vllm_max_num_seqs", 1024, "paper.yaml:"),  # read only by the vllm backend
])
def test_a_default_edited_in_the_schema_moves_exactly_the_keys_of_the_stages_that_read_it(
        monkeypatch, fresh_stage_schemas, section, name, value, moved):
    before = _snapshot_keys()

    def edit(root):
        node = root["properties"][section]
        node = node["additionalProperties"] if section == "methods" else node
        node["properties"][name]["default"] = value

    _edited_schema(monkeypatch, edit)
    changed = _moved(before, _snapshot_keys())
    if moved is None:
        assert changed == []
    else:
        assert changed and all(moved in c for c in changed), changed
        readers = {f"{n}:{k}" for n in before for k in before[n]
                   if moved in f"{n}:{k}" and not k.startswith(("data", "pretrain", "regimes", "masks", "report"))
                   and (section != "sampling" or k.startswith(("calibrate", "gate-draws", "evaluate")))}
        assert set(changed) == readers, sorted(set(changed) ^ readers)


def test_a_method_knob_s_default_moves_the_key_of_the_methods_that_read_it_alone(monkeypatch, fresh_stage_schemas):
    import yaml

    from boundary.core.config import validate_config

    raw = yaml.safe_load((ROOT / "tests" / "configs" / "smoke.yaml").read_text())
    raw["methods"]["pba"].pop("support_floor")  # the support anchor's floor, at its default
    before = stage_keys(validate_config(raw))

    def edit(root):
        root["properties"]["methods"]["additionalProperties"]["properties"]["support_floor"]["default"] = 0.05

    _edited_schema(monkeypatch, edit)
    after = stage_keys(validate_config(raw))
    assert [k for k in before if before[k] != after[k]] == ["train/pba"]


def test_a_default_edit_never_resumes_a_checkpoint_made_under_the_old_value(monkeypatch, fresh_stage_schemas,
                                                                           tmp_path):
    """`boundary train` resumes only checkpoints under its run key, made from the key of its
    complete settings: a hand-written --settings that leaves weight_decay unset too."""
    from boundary.stages.train import run_key

    given = {"steps": 2, "lr": 1e-4, "num_generations": 2, "prompts_per_step": 2}
    before = run_key(tmp_path, settings.resolve("train", given), 0, {}, None)
    assert run_key(tmp_path, settings.resolve("train", given), 0, {}, None) == before

    def edit(root):
        root["properties"]["train"]["properties"]["weight_decay"]["default"] = 0.01

    _edited_schema(monkeypatch, edit)
    assert run_key(tmp_path, settings.resolve("train", given), 0, {}, None) != before


def test_the_base_draws_sample_at_their_own_seeds_and_base_seeds_stays_out_of_every_key():
    config = load_config(ROOT / "tests" / "configs" / "smoke.yaml")
    one = settings.evaluate_key(config, DIAGNOSTIC, BASE, 0)
    config["evaluate"]["base_seeds"] = 3
    assert settings.base_seeds(config) == 3
    assert settings.evaluate_key(config, DIAGNOSTIC, BASE, 0) == one  # finished runs rerun nothing
    assert settings.evaluate_key(config, DIAGNOSTIC, "grpo", 2) == one  # common random numbers
    third = settings.evaluate_key(config, DIAGNOSTIC, BASE, 2)
    assert third["evaluate"]["seed"] == one["evaluate"]["seed"] + 2 * settings.BASE_SEED_STRIDE
    assert "base_seeds" not in third["evaluate"]


def test_a_setting_read_only_with_another_is_in_the_key_only_where_it_is_read():
    """x-read-with: the engine's settings are in a vllm run's key, in no generate run's."""
    config = load_config(ROOT / "tests" / "configs" / "smoke.yaml")
    method = next(m for m, s in config["methods"].items() if not s["checkpoint_of"])
    assert not [k for k in settings.train_key(config, method) if k.startswith("vllm_")]
    config["train"]["rollout_engine"] = "vllm"
    key = settings.train_key(config, method)
    assert key["vllm_importance_sampling"] is settings.defaults("train")["vllm_importance_sampling"] is False
    config["train"]["vllm_importance_sampling"] = "token_truncate"
    assert settings.train_key(config, method)["vllm_importance_sampling"] == "token_truncate"


def test_an_adaptive_calibration_s_key_holds_its_rule_and_a_full_one_s_leaves_it_out():
    config = load_config(ROOT / "tests" / "configs" / "smoke.yaml")
    full = settings.calibrate_key(config, DIAGNOSTIC)
    assert not {"adaptive", "rounds", "delta"} & set(full["calibration"]) and "regimes" not in full
    config["calibration"]["adaptive"] = True
    adaptive = settings.resolve("calibrate", settings.calibrate_key(config, DIAGNOSTIC))
    assert adaptive["regimes"] == config["regimes"]
    assert adaptive["calibration"]["rounds"] == settings.defaults("calibration")["rounds"]
    with pytest.raises(BoundaryError, match=r"^calibrate settings: regimes: missing"):
        settings.resolve("calibrate", {**full, "calibration": {**full["calibration"], "adaptive": True}})


def test_one_calibration_shard_stays_out_of_the_key_and_more_are_in_it():
    config = load_config(ROOT / "tests" / "configs" / "smoke.yaml")
    assert config["calibration"]["shards"] == 1  # the schema's default, written into the config
    one = settings.calibrate_key(config, DIAGNOSTIC)
    assert "shards" not in one["calibration"]  # runs made before the key rerun nothing
    config["calibration"]["shards"] = 4  # other draws (offset streams): another key
    assert settings.calibrate_key(config, DIAGNOSTIC)["calibration"]["shards"] == 4
    assert settings.resolve("calibrate", one)["calibration"]["shards"] == 1


def test_sampling_shards_reach_the_evaluation_keys_only():
    """Changing sampling.shards between GPU leases remakes no calibration, gate draw or mask
    (they are carried, never recomputed); evaluations are split by it (the base rollouts too,
    into other files: their key is the training's, which does not hold it)."""
    config = load_config(ROOT / "tests" / "configs" / "smoke.yaml")
    before = stage_keys(config)
    config["sampling"]["shards"] = 2
    after = stage_keys(config)
    changed = [k for k in before if before[k] != after[k]]
    assert changed and changed == [k for k in before if k.startswith("evaluate/")]


def test_complete_settings_hold_every_default_of_the_schema():
    full = settings.resolve("train", {"steps": 2, "lr": 1e-4, "num_generations": 2, "prompts_per_step": 2})
    assert full["kl_estimator"] == settings.defaults("methods")["kl_estimator"]
    assert full["refresh_steps"] == settings.defaults("gate")["refresh_steps"]
    assert full["verify_timeout"] == settings.defaults("verify")["timeout"]
    assert full["gradient_checkpointing"] == "auto" and "save_steps" not in full
    soft = settings.resolve("masks", {"kind": "soft", "G0": 8, "tau": 0.1, "epochs": 1})
    assert soft["confidence"] == 0.9
    assert "confidence" not in settings.resolve("masks", {"kind": "gate", "G0": 8, "tau": 0.1, "epochs": 1})
    cal = settings.resolve("calibrate", {"calibration": {"n": 4, "seed": 0}})
    assert cal["sampling"]["max_new_tokens"] == 8192 and cal["sampling"]["vllm_max_num_seqs"] == 4096
    assert schema.allowed("methods", "kl_estimator") == ("k1", "k2", "k3")


@pytest.mark.parametrize("stage, given, says", [
    ("regimes", {"easy": "high"}, "regimes settings: easy: 'high' is not of type 'number'"),
    ("evaluate", {}, "evaluate settings: evaluate: missing"),
    ("evaluate", {"evaluate": {"n": 4, "seed": 0}, "sampling": {"backend": "tgi"}}, "sampling.backend"),
    ("train", {"steps": 2, "lr": 1e-4, "num_generations": 2, "prompts_per_step": 2, "kl_estimator": "k4"},
     "train settings: kl_estimator: 'k4' is not one of"),
    ("train", {"steps": 2, "lr": 1e-4, "num_generations": 2}, "train settings: prompts_per_step: missing"),
    ("train", {"steps": 2, "lr": 1e-4, "num_generations": 2, "prompts_per_step": 2, "learning_rate": 1},
     "unknown key 'learning_rate'"),
    ("masks", {"kind": "random", "fraction": 0.5, "epochs": 1}, "masks settings: seed: missing"),
    ("masks", {"kind": "gate", "G0": 8, "tau": 0.1, "epochs": 1, "seed": 3}, "seed: not read by a gate mask"),
    ("gate-draws", {"gate": {"G0": 4}}, "gate-draws settings: gate.epochs: missing"),
    ("report", {"ks": [0]}, "report settings: ks.0"),
    ("pretrain", {"task": {}, "model": {}}, "pretrain settings: pretrain: missing"),
])
def test_a_bad_settings_is_one_line_naming_the_key(stage, given, says):
    with pytest.raises(BoundaryError) as err:
        settings.resolve(stage, given)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("command, given, says", [
    ("regimes", '{"easy": "0.6"}', "--settings: regimes settings: easy:"),
    ("evaluate", "{}", "--settings: evaluate settings: evaluate: missing"),
])
def test_a_stage_command_refuses_a_bad_settings_in_one_line(command, given, says, tmp_path, capsys):
    from boundary import cli

    paths = {"regimes": ["--calibration", str(tmp_path / "c.parquet"), "--out", str(tmp_path / "r.parquet")],
             "evaluate": ["--model", str(tmp_path), "--split", str(tmp_path / "s.parquet"),
                          "--samples", str(tmp_path / "s.parquet")]}
    code = cli.main([command, "--settings", given, *paths[command]])
    err = capsys.readouterr().err.strip()
    assert code == 1 and says in err and len(err.splitlines()) == 1, err


# ---- every default written once ----------------------------------------------------------------
# The rule, checked on the package's source (workflow/boundary) by name: a name that is a config
# key with a schema default (any section: schema_defaults.json) is
# never given a literal value
#   (a) as the fallback of `.get(name, X)`, `.setdefault(name, X)` or `.pop(name, X)`;
#   (b) as a dataclass field's default (`name: T = X`, `field(default=X)`);
#   (c) as the default of an option `--name` (`add_argument("--name", default=X)`, dashes read
#       as underscores).
# The value is read from the settings layer instead (`defaults(section)`, or the complete
# settings a stage resolves). None and empty containers are exempt: they say "unset", not a
# value. Out of reach, so not checked: a default under another name, and keyword defaults of
# library functions (a statistic's `level=0.95`, a generator's `seed=0`): those names are too
# generic to tie to one config key, and every stage passes its settings' value.
PACKAGE = ROOT / "workflow" / "boundary"


def _config_keys() -> set[str]:
    return {key for section in json.loads(settings.DEFAULTS_PATH.read_text()).values() for key in section}


def _literal(node) -> bool:
    import ast

    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return value is not None and value not in ([], {}, (), "")


def written_defaults(source: str, keys: set[str]) -> list[tuple[int, str]]:
    """(line, code) of every default the rule above forbids in `source`."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "setdefault", "pop") and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys
                and _literal(node.args[1])):
            found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
            for field in node.body:
                if not (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                        and field.target.id in keys and field.value is not None):
                    continue
                value = field.value
                if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field"):
                    value = next((kw.value for kw in value.keywords if kw.arg == "default"), None)
                if value is not None and _literal(value):
                    found.append((field.lineno, f"{node.name}: {ast.unparse(field)}"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            options = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            default = next((kw.value for kw in node.keywords if kw.arg == "default"), None)
            if options and default is not None and _literal(default) and options[0][2:].replace("-", "_") in keys:
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_rule_sees_each_kind_of_written_default():
    keys = {"kl_estimator", "timeout", "confidence"}
    source = '''
from dataclasses import dataclass, field
@dataclass
class C:
    kl_estimator: str = "k1"
    timeout: int = field(default=5)
    confidence: float = DEFAULTS["confidence"]
s.get("confidence", 0.9)
s.get("confidence", DEFAULTS["confidence"])
s.get("confidence")
s.get("other", 1)
p.add_argument("--kl-estimator", default="k1")
p.add_argument("--timeout", default=None)
'''
    assert [line for line, _ in written_defaults(source, keys)] == [5, 6, 8, 12]


def test_no_default_is_written_outside_the_schema():
    keys = _config_keys()
    found = [f"{path.relative_to(ROOT)}:{line}: {code}" for path in sorted(PACKAGE.rglob("*.py"))
             for line, code in written_defaults(path.read_text(), keys)]
    assert found == []


def test_schema_defaults_json_is_the_schema_s():
    """schema_defaults.json is the schema's defaults rendered (`settings.write_defaults()`
    after an edit of the schema): the yaml-free copy diagnose reads, never edited by hand."""
    assert settings.DEFAULTS_PATH.read_text() == settings.rendered_defaults()


def test_every_allowed_value_is_the_schema_s():
    from boundary.sampling import BACKENDS
    from boundary.training.anchors import ANCHORS, ESTIMATORS

    assert ESTIMATORS == schema.allowed("methods", "kl_estimator")
    assert ANCHORS == schema.allowed("methods", "anchor") and BACKENDS == ("hf", "vllm")
