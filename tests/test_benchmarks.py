"""`boundary get-data`: GSM8K, MATH500 and Omni-MATH-Rule into the layout the configs read, from
local copies in every form it takes (this layout, the hub's parquet shards, one file, a
save_to_disk folder) and through the hub path with datasets.load_dataset stood in (the machines
here have no hub). The published copies are ../shared/data; tests that need them skip without."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import ROOT

from boundary import cli
from boundary.core.errors import BoundaryError
from boundary.tasks import benchmarks
from boundary.tasks.benchmarks import BENCHMARKS

SHARED = ROOT.parent / "shared" / "data"
needs_shared = pytest.mark.skipif(not (SHARED / "gsm8k" / "train.jsonl").is_file(),
                                  reason="no ../shared/data (the published benchmark files)")


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def get_data(*argv, capsys):
    assert cli.main(["get-data", *map(str, argv)]) == 0
    return capsys.readouterr()


@needs_shared
def test_a_copy_in_this_layout_gives_the_published_files_byte_for_byte(tmp_path, capsys):
    out = get_data("gsm8k", "math500", "omni_math_rule", "--from", SHARED, "--out", tmp_path / "data",
                   capsys=capsys)
    for name, spec in BENCHMARKS.items():
        for split in spec.splits:
            path = tmp_path / "data" / name / f"{split}.jsonl"
            assert sha(path) == spec.sha256[split] == sha(SHARED / name / f"{split}.jsonl")
            assert len(rows_of(path)) == spec.rows[split]
    assert out.out.count("the published file") == 4 and out.err == ""


@needs_shared
def test_the_hubs_parquet_shards_and_one_parquet_file_give_the_same_bytes(tmp_path, capsys):
    """GSM8K as the hub keeps it (main/train-00000-of-00001.parquet, ...; an extra column the
    layout drops), MATH500 as one parquet file: the rows are read back as JSON holds them."""
    hub = tmp_path / "hub_gsm8k" / "main"
    hub.mkdir(parents=True)
    for split in ("train", "test"):
        rows = rows_of(SHARED / "gsm8k" / f"{split}.jsonl")
        table = pa.Table.from_pylist([{**r, "__index_level_0__": i} for i, r in enumerate(rows)])
        pq.write_table(table, hub / f"{split}-00000-of-00001.parquet")
    get_data("gsm8k", "--from", tmp_path / "hub_gsm8k", "--out", tmp_path / "data", capsys=capsys)
    pq.write_table(pa.Table.from_pylist(rows_of(SHARED / "math500" / "test.jsonl")), tmp_path / "m.parquet")
    get_data("math500", "--from", tmp_path / "m.parquet", "--out", tmp_path / "data", capsys=capsys)
    for name, split in (("gsm8k", "train"), ("gsm8k", "test"), ("math500", "test")):
        assert sha(tmp_path / "data" / name / f"{split}.jsonl") == BENCHMARKS[name].sha256[split]


@needs_shared
def test_a_save_to_disk_folder(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    splits = {s: datasets.Dataset.from_list(rows_of(SHARED / "gsm8k" / f"{s}.jsonl")) for s in ("train", "test")}
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "saved"))
    get_data("gsm8k", "--from", tmp_path / "saved", "--out", tmp_path / "data", capsys=capsys)
    assert sha(tmp_path / "data" / "gsm8k" / "test.jsonl") == BENCHMARKS["gsm8k"].sha256["test"]


@needs_shared
def test_the_hub_path_reads_what_load_dataset_returns(tmp_path, capsys, monkeypatch):
    """Online (no offline switch set): each benchmark's splits come from datasets.load_dataset
    with the hub's names (stood in by the published rows)."""
    datasets = pytest.importorskip("datasets")
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    calls = []

    def load_dataset(path, name=None, split=None, data_files=None):
        calls.append((path, name, split, data_files))
        local = {("openai/gsm8k", "train"): "gsm8k/train", ("openai/gsm8k", "test"): "gsm8k/test",
                 ("HuggingFaceH4/MATH-500", "test"): "math500/test", ("json", "train"): "omni_math_rule/test"}
        return datasets.Dataset.from_list(rows_of(SHARED / f"{local[path, split]}.jsonl"))

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    out = get_data("gsm8k", "math500", "omni_math_rule", "--out", tmp_path / "data", capsys=capsys)
    assert out.out.count("the published file") == 4
    assert calls[:3] == [("openai/gsm8k", "main", "train", None), ("openai/gsm8k", "main", "test", None),
                         ("HuggingFaceH4/MATH-500", None, "test", None)]
    assert calls[3][0] == "json" and calls[3][3].endswith("/evaluation/data/omni_math_rule/test.jsonl")
    assert benchmarks.OMNI_COMMIT in calls[3][3]  # a pinned revision, not a moving branch


def test_offline_mode_names_the_switch_and_the_local_way(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    with pytest.raises(BoundaryError) as err:
        benchmarks.main(["math500", "--out", str(tmp_path)])
    assert str(err.value) == ("math500: HuggingFaceH4/MATH-500 was not fetched: offline mode is on "
                              "(HF_HUB_OFFLINE=1): unset HF_HUB_OFFLINE to download from the hub, or give a "
                              "local copy with --from PATH")
    assert not (tmp_path / "math500").exists()


@needs_shared
def test_a_changed_copy_is_written_with_a_warning_and_bad_copies_are_one_line(tmp_path, capsys):
    rows = rows_of(SHARED / "math500" / "test.jsonl")
    subset = tmp_path / "subset.jsonl"
    subset.write_text("".join(json.dumps(r) + "\n" for r in rows[:10]))
    out = get_data("math500", "--from", subset, "--out", tmp_path / "data", capsys=capsys)
    assert len(rows_of(tmp_path / "data" / "math500" / "test.jsonl")) == 10
    assert out.err.count("\n") == 1 and "10 rows (published: 500)" in out.err and "not the published" in out.err
    def write(name, content):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in content))
        return str(tmp_path / name)

    no_id = write("no_id.jsonl", [{k: v for k, v in r.items() if k != "unique_id"} for r in rows[:3]])
    with pytest.raises(BoundaryError) as err:
        benchmarks.main(["math500", "--from", no_id, "--out", str(tmp_path / "x")])
    assert str(err.value) == (f"{no_id}: math500 needs the field(s) unique_id; "
                              "it has problem, solution, answer, subject, level")
    plain = write("gsm8k.jsonl", [{"question": "1+1?", "answer": "2"}])
    with pytest.raises(BoundaryError, match=r"gsm8k has 2 splits \(train, test\); give a folder holding them"):
        benchmarks.main(["gsm8k", "--from", plain, "--out", str(tmp_path / "x")])
    (tmp_path / "g").mkdir()
    shutil.copy(tmp_path / "gsm8k.jsonl", tmp_path / "g" / "train.jsonl")
    shutil.copy(tmp_path / "gsm8k.jsonl", tmp_path / "g" / "test.jsonl")
    with pytest.raises(BoundaryError, match="row 1: a GSM8K answer ends in '#### <number>'"):
        benchmarks.main(["gsm8k", "--from", str(tmp_path / "g"), "--out", str(tmp_path / "x")])
    (tmp_path / "g" / "test.jsonl").unlink()
    with pytest.raises(BoundaryError, match="no test file of math500"):
        benchmarks.main(["math500", "--from", str(tmp_path / "g"), "--out", str(tmp_path / "x")])
    with pytest.raises(BoundaryError, match="aime: not a benchmark get-data knows"):
        benchmarks.main(["aime", "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()  # nothing written by a refused copy


@needs_shared
def test_the_configs_read_what_get_data_writes(tmp_path, capsys, monkeypatch):
    """Every data path of the configs in get-data's layout (data/gsm8k/, data/math500/,
    data/omni_math_rule/) is a file get-data wrote, and the data stage reads each split as its
    config maps it."""
    from boundary.stages.data import load_dataset_file

    get_data("gsm8k", "math500", "omni_math_rule", "--from", SHARED, "--out", tmp_path / "data", capsys=capsys)
    monkeypatch.chdir(tmp_path)
    layout = tuple(f"data/{name}/" for name in BENCHMARKS)
    read = set()
    for config in sorted((ROOT / "config").glob("*.yaml")):
        data = (yaml.safe_load(config.read_text()) or {}).get("data") or {}
        specs = [("train", data.get("train")), ("diagnostic", data.get("diagnostic")),
                 *(data.get("benchmarks") or {}).items()]
        for name, spec in specs:
            if spec and spec["path"].startswith(layout):
                spec = {"problem_field": "problem", "answer_field": "answer", **spec}
                split = load_dataset_file(spec, name)
                assert len(split) and split["answer"].str.len().min() > 0, (config.name, name)
                read.add(spec["path"])
    assert read == {f"data/{n}/{s}.jsonl" for n, spec in BENCHMARKS.items() for s in spec.splits}
