"""Content digests (core/digests.py): what a rerun compares for data files and model folders,
and the record that names an artifact changed by hand."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from boundary.core import digests
from boundary.core.artifacts import atomic_dir, write_table


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A digest store, as the workflow sets one for its process and jobs."""
    monkeypatch.setenv(digests.ENV, str(tmp_path / "store"))
    return tmp_path / "store"


def _rewrite_in_place(path, data: bytes) -> None:
    """Overwrite a file's bytes in place (same inode), then set its mtime back: what a tool
    that re-saves and preserves times (cp -p, rsync -t) leaves."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("with_store", [False, True])
def test_a_same_size_rewrite_with_its_mtime_kept_changes_the_digest(tmp_path, monkeypatch, with_store):
    if with_store:
        monkeypatch.setenv(digests.ENV, str(tmp_path / "store"))
    data = tmp_path / "gold.jsonl"
    data.write_text('{"problem": "1+1", "answer": "3"}\n')
    before = digests.digest(data)
    assert digests.digest(data) == before  # kept (with a store) or recomputed: the same
    _rewrite_in_place(data, b'{"problem": "1+1", "answer": "2"}\n')
    assert digests.digest(data) != before


def test_a_touch_or_a_copy_keeps_the_digest(tmp_path, store):
    data = tmp_path / "a.jsonl"
    data.write_text("x\n")
    before = digests.digest(data)
    os.utime(data)
    assert digests.digest(data) == before
    copy = tmp_path / "b" / "a.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(data.read_bytes())
    assert digests.digest(copy) == before


def test_a_folder_re_saved_in_place_changes_its_digest(tmp_path, store):
    """The base model folder's own mtime does not change when a file inside is overwritten;
    its manifest does."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\x00" * 64)
    (model / "config.json").write_text("{}")
    (model / ".snakemake_timestamp").write_text("")
    before, folder_mtime = digests.digest(model), model.stat().st_mtime_ns
    (model / ".snakemake_timestamp").write_text("touched")  # Snakemake's mark: not content
    assert digests.digest(model) == before
    _rewrite_in_place(model / "model.safetensors", b"\x01" * 64)
    assert model.stat().st_mtime_ns == folder_mtime and digests.digest(model) != before
    assert digests.digest(tmp_path / "nothing") == "missing"


def test_a_kept_hash_is_used_while_the_file_is_unchanged(tmp_path, store, monkeypatch):
    """A large model is not read again at every DAG build: its hash is kept under its stat."""
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"w" * 1000)
    first = digests.digest(weights, written=True)
    monkeypatch.setattr(digests, "open", lambda *a, **k: pytest.fail("read again"), raising=False)
    assert digests.digest(weights) == first


def test_an_artifact_changed_since_written_is_named(tmp_path, store):
    samples = tmp_path / "eval" / "samples.parquet"
    write_table(pd.DataFrame({"prompt_id": ["a", "b"], "correct": [1, 0]}), samples)
    assert not digests.changed_since_written(samples)
    os.utime(samples)  # a touch is no change
    assert not digests.changed_since_written(samples)
    samples.write_bytes(samples.read_bytes()[:10])  # truncated by hand
    assert digests.changed_since_written(samples)
    samples.unlink()  # gone: Snakemake makes it again
    assert not digests.changed_since_written(samples)


def test_a_model_folder_written_whole_is_recorded(tmp_path, store):
    folder = tmp_path / "final"
    with atomic_dir(folder, "boundary train") as tmp:
        (tmp / "model.safetensors").write_bytes(b"\x00" * 32)
    assert not digests.changed_since_written(folder)
    _rewrite_in_place(folder / "model.safetensors", b"\x02" * 32)
    assert digests.changed_since_written(folder)


def test_nothing_is_recorded_outside_a_workflow_run(tmp_path, monkeypatch):
    """`boundary diagnose` and stages run by hand keep no record (no store set)."""
    monkeypatch.delenv(digests.ENV, raising=False)
    path = tmp_path / "t.parquet"
    write_table(pd.DataFrame({"a": [1]}), path)
    path.write_bytes(b"edited")
    assert not digests.changed_since_written(path)
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]
