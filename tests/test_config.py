import copy

import pytest
import yaml
from conftest import ROOT

from boundary.core.config import MASK_KEYS, load_config, validate_config
from boundary.core.errors import BoundaryError
from boundary.core.settings import read as load_stage_settings
from boundary.core.settings import text as dumps


@pytest.mark.parametrize("path", [*sorted((ROOT / "config").glob("*.yaml")),
                                  *sorted((ROOT / "tests" / "configs").glob("*.yaml"))], ids=lambda p: p.name)
def test_shipped_configs_validate(path):
    config = load_config(path)
    assert config["train"]["loss_type"] == "grpo"  # never TRL's dapo default
    assert all(max(config["evaluate"]["ks"]) <= config["evaluate"]["n"] for _ in [0])


def test_paper_config_states_the_run_card():
    paper = load_config(ROOT / "config" / "paper.yaml")
    train = paper["train"]
    assert (train["lr"], train["num_generations"], train["prompts_per_step"]) == (1e-6, 8, 256)
    assert (train["steps"], train["checkpoints"]) == (1000, [100, 300, 600, 1000])
    assert train["warmup_ratio"] == 0.05 and train["max_grad_norm"] == 1.0 and train["bf16"] is True
    assert (train["gpus"], train["sharding"]) == (8, "fsdp")  # a 7.6B policy, AdamW: DDP cannot fit
    stated = {"n": 256, "temperature": 0.6, "top_p": 0.95, "seed": 3003, "ks": [1, 4, 16, 64, 256],
              "base_seeds": 1, "sequential": False}  # the paper draws every policy's 256 in full
    assert {k: paper["evaluate"][k] for k in stated} == stated
    assert paper["gate"]["G0"] == 8 and paper["gate"]["tau"] == 0.10
    assert (train["rollout_engine"], train["vllm_gpu_memory_utilization"]) == ("vllm", 0.35)  # as measured
    assert paper["gate"]["refresh_steps"] == 100
    pba = paper["methods"]["pba"]
    assert (pba["anchor"], pba["kl_estimator"], pba["beta_a"]) == ("policy", "k1", 1.0)
    assert paper["methods"]["global_kl"]["beta_kl"] == 0.035
    assert paper["methods"]["entropy"]["entropy_coef"] == 0.012
    assert {k: paper["masks"]["random"][k] for k in MASK_KEYS["random"] | {"kind"} if k in paper["masks"]["random"]} == {
        "kind": "random", "fraction": 0.7, "seed": 17}


def _default():
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c.update(trian={}), "config: unknown key 'trian'"),
    (lambda c: c["gate"].update(tua=0.2), "config: unknown key 'gate.tua'"),
    (lambda c: c["train"].update(lr="fast"), "config: train.lr: 'fast' is not of type 'number'"),
    (lambda c: c["gate"].update(tau=1.5), "config: gate.tau: 1.5 is greater than the maximum of 1"),
    (lambda c: c["sampling"].update(vllm_max_num_seqs=16384),  # vLLM refuses it above max_num_batched_tokens
     "config: sampling.vllm_max_num_seqs: 16384 is greater than the maximum of 8192"),
    (lambda c: c["methods"]["pba"].update(mask="nope"), "config: methods.pba.mask: no mask named 'nope'"),
    (lambda c: c["evaluate"].update(ks=[1, 512]), "config: evaluate.ks: every k must be <= evaluate.n"),
    (lambda c: c.pop("train"), "config: train: missing"),
    (lambda c: c.update(run=".."), "config: run: '..' does not match '^[A-Za-z0-9_][A-Za-z0-9_.-]*$'"),
    (lambda c: c.update(run="a/b"), "config: run: 'a/b' does not match '^[A-Za-z0-9_][A-Za-z0-9_.-]*$'"),
    (lambda c: c["evaluate"].update(ks=[]), "config: evaluate.ks: [] should be non-empty"),
    (lambda c: c["evaluate"].update(ks=[4, 4]), "config: evaluate.ks: [4, 4] has non-unique elements"),
    (lambda c: c["train"].update(checkpoints=[10**6]), "config: train.checkpoints: every step must be <= train.steps"),
    (lambda c: c["regimes"].update(easy=0.05), "config: regimes: boundary must be <= easy"),
    (lambda c: c["regimes"].update(coverage_min=1.0), "config: regimes.coverage_min: must be < 1"),
    (lambda c: c.update(prompt={"template": "Solve:"}), "config: prompt.template: must contain {problem}"),
    (lambda c: c["train"].update(gpus=3), "config: train.gpus: 3 processes do not divide a step's "
                                          "prompts_per_step x num_generations = 64 completions; choose a "
                                          "count that divides it"),
    (lambda c: c["train"].update(gpus=2, gradient_accumulation_steps=64),
     "config: train.gpus: 2 processes do not divide a step's prompts_per_step x num_generations = 64 "
     "completions into 64 accumulation steps each; choose a count that divides it"),
    (lambda c: c["train"].update(sharding="zero3"), "config: train.sharding: 'zero3' is not one of ['ddp', 'fsdp']"),
    (lambda c: c["train"].update(sharding="fsdp"), "config: train.sharding: fsdp needs train.gpus >= 1 "
                                                   "(accelerate runs FSDP on GPUs only; on the CPU it would "
                                                   "train unsharded)"),
    # Names: the rules' wildcard pattern, and the pipeline's own names (core/names.py).
    (lambda c: c["methods"].update({"grpo-b": {}}), "config: methods: name 'grpo-b': names hold only "
     "letters, digits and _ (they become folder, file and rule names)"),
    (lambda c: c["methods"].update({" ": {}}), "config: methods: a blank name: names hold only letters, "
     "digits and _ (they become folder, file and rule names)"),
    (lambda c: c["masks"].update({"pba.v2": {"kind": "gate"}}), "config: masks: name 'pba.v2': names hold "
     "only letters, digits and _ (they become folder, file and rule names)"),
    (lambda c: c["methods"].update({"base": {}}), "config: methods.base: a name the pipeline uses itself "
     "(eval/*/base/ is the frozen base's evaluation); choose another"),
    # Counts are integers, never floats JSON schema would take for them; seeds are distinct.
    (lambda c: c["evaluate"].update(n=32.0), "config: evaluate.n: 32.0 is not of type 'integer'"),
    (lambda c: c["train"].update(seeds=[0.0, 1]), "config: train.seeds.0: 0.0 is not of type 'integer'"),
    (lambda c: c["train"].update(seeds=[0, 1, 1]), "config: train.seeds: [0, 1, 1] has non-unique elements"),
    (lambda c: c["methods"]["grpo"].update(seeds=[2, 2]), "config: methods.grpo.seeds: [2, 2] has non-unique elements"),
    # Settings the run would not read.
    (lambda c: c.update(base_model="models/m"), "config: base_model: not used with a testbed section (the "
     "testbed pretrains its own base on its own prompts); remove one of the two"),
    (lambda c: c.update(arithmetic={"splits": {"train": 8}}), "config: arithmetic: not used with a testbed "
     "section (the testbed pretrains its own base on its own prompts); remove one of the two"),
    (lambda c: c["methods"]["grpo"].update(negative_weight=0.0), "config: methods.grpo.negative_weight: "
     "read only with advantage: reinforce, which this method does not set"),
    (lambda c: c["methods"]["grpo"].update(anchor="support"), "config: methods.grpo.anchor: only a mask's "
     "prompts are anchored, and this method has no mask; it would train plain GRPO under its name"),
    (lambda c: c["methods"]["pba"].update(masked_action="drop"), "config: methods.pba.anchor: only a mask's "
     "prompts are anchored, and this method drops its mask's prompts (masked_action: drop); it would train "
     "plain GRPO under its name"),
    (lambda c: c["methods"]["pba"].pop("anchor"), "config: methods.pba.anchor: required when a mask anchors "
     "prompts (policy, base, support, forward_kl or js)"),
    (lambda c: c["methods"]["pba"].update(anchor="policy"), "config: methods.pba.support_floor: read only "
     "with anchor: support, which this method does not set"),
    (lambda c: c["methods"]["grpo"].update(passk_k=2), "config: methods.grpo.passk_k: read only with "
     "advantage: passk, which this method does not set"),
    (lambda c: c["methods"]["grpo"].update(kl_estimator="k3"), "config: methods.grpo.kl_estimator: read "
     "only with anchor: policy or beta_kl > 0, which this method does not set"),
    (lambda c: c["methods"]["grpo"].update(kl_value_every=10), "config: methods.grpo.kl_value_every: read only "
     "with kl_estimator: k1 and only k1 terms on the base (anchor: policy, or beta_kl > 0 with anchor: base or "
     "none), which this method does not set"),
    (lambda c: c["methods"]["pba"].update(anchor="support", kl_value_every=10), "config: "
     "methods.pba.kl_value_every: read only with kl_estimator: k1 and only k1 terms on the base (anchor: "
     "policy, or beta_kl > 0 with anchor: base or none), which this method does not set"),
    (lambda c: c["methods"]["grpo"].update(masked_action="drop"), "config: methods.grpo.masked_action: read "
     "only with a mask, which this method does not set"),
    (lambda c: c["masks"].update(r={"kind": "random", "fraction": 0.5}), "config: masks.r.seed: required by "
     "a random mask"),
    (lambda c: c["masks"]["pba"].update(fraction=0.5), "config: masks.pba.fraction: not read by a gate mask "
     "(it reads G0, tau)"),
    (lambda c: c["masks"].update(r={"kind": "random", "seed": 1}), "config: masks.r: give fraction or share_of "
     "(a gate mask's name: its protected share), one of the two"),
    (lambda c: c["masks"].update(r={"kind": "random", "seed": 1, "fraction": 0.5, "share_of": "pba"}),
     "config: masks.r: give fraction or share_of (a gate mask's name: its protected share), one of the two"),
    (lambda c: c["masks"].update(r={"kind": "random", "seed": 1, "share_of": "random"}),
     "config: masks.r.share_of: 'random' is not a gate, soft or solved mask of this config"),
    (lambda c: c["methods"].update(late={"checkpoint_of": "grpo", "step": 100, "beta_kl": 0.1}),
     "config: methods.late.beta_kl: not used by a checkpoint_of method (it evaluates grpo's policy; set it "
     "there)"),
    (lambda c: c["methods"]["grpo"].update(step=4), "config: methods.grpo.step: used only with checkpoint_of"),
    (lambda c: c["prompt"].update(system="Be brief."), "config: prompt.system: read only with prompt.chat: "
     "true (the chat template places it)"),
    (lambda c: c["train"].update(vllm_mode="colocate"), "config: train.vllm_mode: read only with "
     "train.rollout_engine: vllm"),
    (lambda c: c["train"].update(use_vllm=True), "config: train.use_vllm: replaced by train.rollout_engine "
     "(generate | vllm; vllm: TRL's engine, colocated unless vllm_mode: server)"),
    (lambda c: c["calibration"].update(delta=0.05), "config: calibration.delta: read only with "
     "calibration.adaptive: true"),
    (lambda c: (c["calibration"].update(adaptive=True), c["sampling"].update(backend="vllm")),
     "config: calibration.adaptive: true needs sampling.backend: hf (vllm would start its engine once per "
     "round, about 80-90 s each on a GPU)"),
    (lambda c: c["evaluate"].update(block=8), "config: evaluate.block: read only with evaluate.sequential: true"),
    (lambda c: (c["evaluate"].update(sequential=True), c["sampling"].update(backend="vllm")),
     "config: evaluate.sequential: true needs sampling.backend: hf (vllm would start its engine once per "
     "round, about 80-90 s each on a GPU)"),
])
def test_bad_config_is_one_line_naming_the_field(mutate, message):
    assert _refusal(_default(), mutate) == message


def _refusal(config: dict, mutate) -> str:
    """The one line that validation of `config`, once mutated, stops with."""
    mutate(config)
    with pytest.raises(BoundaryError) as err:
        validate_config(config)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("section, key, text, shown", [
    ("evaluate", "temperature", ".nan", ".nan"), ("train", "lr", ".inf", ".inf"),
    ("gate", "tau", "-.inf", "-.inf"), ("train", "checkpoints", "[2, .nan]", ".nan"),
])
def test_a_value_that_is_not_finite_is_one_line(section, key, text, shown):
    """NaN passes every schema bound (each comparison with it is false): refused by name."""
    config = _default()
    config[section][key] = yaml.safe_load(f"v: {text}")["v"]
    with pytest.raises(BoundaryError) as err:
        validate_config(config)
    where = f"{section}.{key}" + (".1" if text.startswith("[") else "")
    assert str(err.value) == f"config: {where}: {shown} is not a finite number"


def test_stage_settings_that_are_not_finite_are_one_line():
    with pytest.raises(BoundaryError) as err:
        load_stage_settings('{"sampling": {"temperature": NaN}}')
    assert str(err.value) == "--settings: sampling.temperature: .nan is not a finite number"


def test_defaults_are_filled_without_touching_the_input():
    config = _default()
    before = copy.deepcopy(config)
    filled = validate_config(config)
    assert config == before
    assert filled["methods"]["grpo"]["anchor"] is None
    assert filled["methods"]["pba"]["masked_action"] == "anchor"


def test_settings_serialise_stably(tmp_path):
    a, b = {"b": 1, "a": {"y": 2, "x": 3}}, {"a": {"x": 3, "y": 2}, "b": 1}
    assert dumps(a) == dumps(b)
    assert load_stage_settings(dumps(a)) == a
    path = tmp_path / "s.json"
    path.write_text(dumps(a))
    assert load_stage_settings(str(path)) == a
    with pytest.raises(BoundaryError, match="--settings"):
        load_stage_settings(str(tmp_path / "missing.json"))


def test_nullable_sections_get_their_defaults():
    """`data` is `[object, "null"]`: its datasets still get problem_field/answer_field."""
    config = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    for spec in [config["data"]["train"], *config["data"]["benchmarks"].values()]:
        spec.pop("problem_field", None)
        spec.pop("answer_field", None)
    filled = validate_config(config)
    train = filled["data"]["train"]
    assert (train["problem_field"], train["answer_field"], train["answer_format"]) == (
        "problem", "answer", "plain")
    assert all(s["problem_field"] == "problem" for s in filled["data"]["benchmarks"].values())


@pytest.mark.parametrize("text, message", [
    ("run: a\ngate: {tau: 0.1}\ntrain: {}\ngate: {tau: 0.5}\n", "line 4: duplicate key 'gate'"),
    ("run: a\ngate:\n  tau: 0.1\n  G0: 8\n  tau: 0.5\n", "line 5: duplicate key 'tau'"),
    ("run: a\ngate: [1, 2\n", "not valid YAML at line 3 (ParserError)"),
    ("- run\n- a\n", "the config must be a mapping of sections, not a list"),
])
def test_config_file_problems_are_one_line(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(BoundaryError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: {message}"


def test_yaml_merge_keys_may_be_overridden(tmp_path):
    from boundary.core.config import load_yaml

    path = tmp_path / "c.yaml"
    path.write_text("base: &b {tau: 0.1, G0: 8}\ngate:\n  <<: *b\n  tau: 0.5\n")
    assert load_yaml(path)["gate"] == {"tau": 0.5, "G0": 8}


def test_a_config_that_is_not_a_mapping():
    with pytest.raises(BoundaryError) as err:
        validate_config(["run", "a"])
    assert str(err.value) == "config: must be a mapping of sections, not a list"


def _paper():
    return yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["data"]["benchmarks"].update(diagnostic=c["data"]["benchmarks"]["math500"]),
     "config: data.benchmarks.diagnostic: a name the pipeline uses itself (eval/diagnostic/ is the "
     "diagnostic split's evaluation); choose another"),
    (lambda c: c["data"]["benchmarks"].update({"math-500": c["data"]["benchmarks"]["math500"]}),
     "config: data.benchmarks: name 'math-500': names hold only letters, digits and _ (they become folder, "
     "file and rule names)"),
    (lambda c: c.update(testbed=yaml.safe_load((ROOT / "tests" / "configs" / "smoke.yaml").read_text())["testbed"]),
     "config: base_model: not used with a testbed section (the testbed pretrains its own base on its own "
     "prompts); remove one of the two"),
])
def test_bad_real_data_config_is_one_line(mutate, message):
    assert _refusal(_paper(), mutate) == message


def test_the_schema_and_the_rules_share_the_name_pattern():
    from boundary.core import schema
    from boundary.core.names import NAME_PATTERN

    assert schema.load()["definitions"]["name"]["pattern"] == f"^{NAME_PATTERN}$"


@pytest.mark.parametrize("content, message", [
    (None, "config file not found"),
    (b"run: a\ngate:\n\ttau: 0.1\n", "not valid YAML at line 3 (a tab in the indentation: indent with "
                                       "spaces) (ScannerError)"),
    (b"run: a\n\xd0\xff\x00\x01", "not a text file (byte 7 is not UTF-8)"),
])
def test_check_config_names_the_file(tmp_path, content, message, boundary_cli):
    """Snakemake reads --configfile before the workflow and names no file for these;
    `boundary check-config` (run.sh runs it first) does, in one line. (In this process: the
    installed command's exit status and lines: the test below.)"""
    path = tmp_path / "c.yaml"
    if content is not None:
        path.write_bytes(content)
    code, _, err = boundary_cli(["check-config", path])
    assert code == 1
    assert err.splitlines() == [f"boundary check-config: error: {path}: {message}"]


def test_check_config_validates_the_merge_of_several_files(tmp_path):
    """The installed `boundary` command, as run.sh runs it: its exit status, and one line."""
    import subprocess

    extra = tmp_path / "extra.yaml"
    extra.write_text("evaluate: {n: 32.0}\n")
    smoke = ROOT / "tests" / "configs" / "smoke.yaml"
    run = subprocess.run(["boundary", "check-config", str(smoke)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout == f"{smoke}: valid\n"
    run = subprocess.run(["boundary", "check-config", str(smoke), str(extra)], capture_output=True, text=True)
    assert run.stderr.splitlines() == [f"boundary check-config: error: {smoke}, {extra}: config: evaluate.n: "
                                       "32.0 is not of type 'integer'"]
