"""Base-model import: one plain folder from a save_pretrained folder or a GGUF file; bad
sources are one line naming the path, and nothing half-written is left."""

import json
import subprocess

import pytest

from boundary.sampling.models import import_base, load_model, stop_ids


def _written(path, data):
    path.write_bytes(data)
    return path


def _boundary(*args):
    return subprocess.run(["boundary", *args], capture_output=True, text=True)


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
def test_a_bad_source_is_one_line_and_writes_nothing(tmp_path, make, message):
    source = make(tmp_path)
    run = _boundary("import-base", "--source", str(source), "--out", str(tmp_path / "out"))
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "boundary import-base: error: " + message.format(p=tmp_path)), run.stderr
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
