"""Base-model import: one plain folder from a save_pretrained folder or a GGUF file; bad
sources are one line naming the path, and nothing half-written is left."""

import json
import subprocess

import pytest

from boundary.core.errors import BoundaryError
from boundary.sampling.models import import_base, load_model, stop_ids


def _written(path, data):
    path.write_bytes(data)
    return path


def test_a_folder_imports_with_its_stop_ids(tiny_model_dir, tmp_path):
    out = tmp_path / "base"
    info = import_base(str(tiny_model_dir), out)
    model, tokenizer = load_model(str(out))
    assert info["eos_token_id"] == stop_ids(model.generation_config, tokenizer)
    assert tokenizer.eos_token_id in info["eos_token_id"]
    assert {"config.json", "generation_config.json", "model.safetensors"} <= {p.name for p in out.iterdir()}


def test_the_generation_configs_stop_ids_win_over_the_tokenizers(tiny_model_dir, tmp_path):
    """A generation config that lists several eos ids keeps them all, and the tokenizer's eos
    becomes the first (TRL also stops at the tokenizer's)."""
    src = tmp_path / "src"
    subprocess.run(["cp", "-r", str(tiny_model_dir), str(src)], check=True)
    gen = json.loads((src / "generation_config.json").read_text())
    gen["eos_token_id"] = [4, 5]
    (src / "generation_config.json").write_text(json.dumps(gen))
    info = import_base(str(src), tmp_path / "base")
    assert info["eos_token_id"] == [4, 5]
    model, tokenizer = load_model(str(tmp_path / "base"))
    assert model.generation_config.eos_token_id == [4, 5] and tokenizer.eos_token_id == 4


@pytest.mark.parametrize("make, message", [
    (lambda p: (p / "m").mkdir() or p / "m", "{p}/m: no tokenizer in the model folder"),
    (lambda p: _written(p / "x.gguf", b"GGUF\x03\x00\x00\x00garbage"),
     "{p}/x.gguf: transformers cannot read this GGUF"),
    (lambda p: p / "missing.gguf", "{p}/missing.gguf: GGUF file not found"),
])
def test_a_bad_source_is_one_line_and_writes_nothing(tmp_path, make, message, boundary_cli):
    source = make(tmp_path)
    code, _, err = boundary_cli(["import-base", "--source", source, "--out", tmp_path / "out"])
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "boundary import-base: error: " + message.format(p=tmp_path)), err
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def _resaved(src, out, names):
    """A copy of the model folder `src` whose weights are renamed or dropped by `names`
    ({old name: new name, or None to drop})."""
    from safetensors.torch import load_file, save_file

    subprocess.run(["cp", "-r", str(src), str(out)], check=True)
    weights = load_file(out / "model.safetensors")
    save_file({names(k): v for k, v in weights.items() if names(k)}, out / "model.safetensors",
              metadata={"format": "pt"})
    return out


def test_a_folder_saved_from_ddp_imports_its_weights_with_one_warning(tiny_model_dir, tmp_path, capsys):
    import torch
    from transformers import AutoModelForCausalLM

    src = _resaved(tiny_model_dir, tmp_path / "ddp", lambda k: "module." + k)
    import_base(str(src), tmp_path / "base")
    assert (f"warning: {src}: every weight name starts with 'module.' (saved from DDP); read without it"
            in capsys.readouterr().err.splitlines())
    model, _ = load_model(str(tmp_path / "base"))
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert all(torch.equal(original[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("names, wrong", [
    (lambda k: None if ".mlp." in k else k, "3 missing (model.layers.0.mlp.down_proj.weight, "
                                            "model.layers.0.mlp.gate_proj.weight, model.layers.0.mlp.up_proj.weight)"),
    (lambda k: k.replace("model.norm", "model.final_norm"), "1 missing (model.norm.weight); 1 unexpected "
                                                            "(model.final_norm.weight)"),
])
def test_weights_that_do_not_fit_the_config_are_one_line(tiny_model_dir, tmp_path, names, wrong):
    """Never a model with randomly initialised weights: import and every later load refuse."""
    src = _resaved(tiny_model_dir, tmp_path / "src", names)
    message = f"{src}: the weights do not fit the model's config: {wrong} (missing ones would be initialised at random)"
    for load in (lambda: import_base(str(src), tmp_path / "base"), lambda: load_model(str(src))):
        with pytest.raises(BoundaryError) as err:
            load()
        assert str(err.value) == message
    assert not (tmp_path / "base").exists()


def test_a_base_model_path_that_does_not_exist_says_so(tmp_path, monkeypatch):
    """Read as a hub id too: offline mode (the user's choice) is named with what to unset, not
    the network."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    with pytest.raises(BoundaryError) as err:
        import_base("models/Qwen2.5-7B", tmp_path / "base")
    assert str(err.value) == ("models/Qwen2.5-7B: no such model folder or file, and as a hub id it was not "
                              "fetched: offline mode is on (HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1): unset "
                              "HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE to download from the hub")


def test_without_offline_mode_a_failed_download_names_the_network_and_the_name(monkeypatch):
    from boundary.core import hub

    for name in hub.OFFLINE_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    assert hub.offline_switches() == []
    assert hub.why_not_fetched().startswith("the hub did not answer or has no such repository")


def test_a_gguf_is_parsed_once_for_the_eos_lookup_and_every_transformers_load(monkeypatch, tmp_path):
    """transformers parses a GGUF afresh for its config, tokenizer and weights, each looking
    GGUFReader up in the gguf module at the call: inside gguf_parsed_once they share one reader a
    file (a 151k-token vocabulary's metadata is about 10 s a parse), and one tensor-name map an
    (arch, layers), which transformers builds again for every submodule; the module is restored."""
    import gguf
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from boundary.sampling import models

    class Parsed(Exception):
        pass

    made = []

    class Reader:
        def __init__(self, path, mode="r"):
            made.append(str(path))

        @property
        def fields(self):
            raise Parsed  # what transformers reads first: its call reached the shared reader

    monkeypatch.setattr(gguf, "GGUFReader", Reader)
    path = tmp_path / "m.gguf"
    with models.gguf_parsed_once():
        assert gguf.GGUFReader(str(path)) is gguf.GGUFReader(path)
        for _ in range(3):  # config, tokenizer, weights
            with pytest.raises(Parsed):
                load_gguf_checkpoint(str(path))
        with pytest.raises(Parsed):
            models._gguf_eos_ids(path)
        arch = next(iter(gguf.MODEL_ARCH_NAMES))  # the name map transformers asks for once a submodule
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
    assert made == [str(path)] and gguf.GGUFReader is Reader
    assert gguf.get_tensor_name_map(arch, 2) is not gguf.get_tensor_name_map(arch, 2)  # restored
