"""Bad input and a hostile environment: each class of bad input is one exact line and leaves
nothing half-written; kills leave nothing a rerun would keep; files get the user's umask.

The verifier's kill/stall/start cases are in test_verify.py, config files in test_config.py,
pass@k memory in test_passk.py, and Snakemake's recovery steps in test_workflow.py.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import pythonpath, stage_here

from boundary.cli import main as cli
from boundary.core import artifacts
from boundary.core.artifacts import atomic_dir, read_table, write_table
from boundary.core.errors import BoundaryError

ENV = {**os.environ, "PYTHONPATH": pythonpath()}  # this tree's package in subprocesses
SEEDS = pd.DataFrame({"method": ["a"] * 3 + ["b"] * 3, "metric": "m", "seed": [0, 1, 2] * 2,
                      "value": [1.0, 2.0, 3.0, 2.0, 3.0, 5.0]})


@pytest.fixture
def files(tmp_path):
    """A long table for `seeds` and base / trained counts for `diagnose`."""
    SEEDS.to_csv(tmp_path / "long.csv", index=False)
    rng = np.random.default_rng(0)
    for name in ("base", "g0", "cal"):
        pd.DataFrame({"prompt_id": [f"p{i}" for i in range(20)], "n": 16,
                      "c": rng.integers(0, 17, 20)}).to_csv(tmp_path / f"{name}.csv", index=False)
    return tmp_path


def error_line(capsys, argv) -> str:
    """Run the CLI; it must fail with exactly one line on stderr, which is returned."""
    assert cli(argv) == 1
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err.strip()


def diagnose_args(d, *extra):
    return ["diagnose", "--base", str(d / "base.csv"), "--trained", f"g:0={d / 'g0.csv'}",
            "--calibration", str(d / "cal.csv"), *extra]


# ----------------------------------------------------------------------------- CLI options

@pytest.mark.parametrize("option, message", [
    (["--level", "1.5"], "argument --level: '1.5' is not a number between 0 and 1 (exclusive)"),
    (["--level", "0"], "argument --level: '0' is not a number between 0 and 1 (exclusive)"),
    (["--pair", "a", "a"], "--pair a a: two different methods, please"),
])
def test_seeds_options(files, capsys, option, message):
    line = error_line(capsys, ["seeds", str(files / "long.csv"), *option, "--out", str(files / "o")])
    assert line == f"boundary seeds: error: {message}"
    assert not (files / "o").exists()


@pytest.mark.parametrize("option, message", [
    (["--resamples", "0"], "argument --resamples: '0' is not a whole number >= 1"),
    (["--resamples", "-5"], "argument --resamples: '-5' is not a whole number >= 1"),
    (["--ks", "0"], "argument --ks: '0' is not a comma-separated list of distinct whole numbers >= 1"),
    (["--ks", "1.9"], "argument --ks: '1.9' is not a comma-separated list of distinct whole numbers >= 1"),
    (["--seed", "-1"], "argument --seed: '-1' is not a whole number >= 0"),
    (["--easy", "1.5"], "argument --easy: '1.5' is not a number between 0 and 1"),
    (["--bins", "0.5"], "argument --bins: '0.5' is not comma-separated increasing numbers from 0 to 1 "
                        "(e.g. 0,0.1,0.5,1)"),
    (["--bins", "0,0.5"], "argument --bins: '0,0.5' is not comma-separated increasing numbers from 0 to 1 "
                          "(e.g. 0,0.1,0.5,1)"),
    (["--bins", "0,0.5,0.2,1"], "argument --bins: '0,0.5,0.2,1' is not comma-separated increasing numbers "
                                "from 0 to 1 (e.g. 0,0.1,0.5,1)"),
    (["--bins", "0,nan,1"], "argument --bins: '0,nan,1' is not comma-separated increasing numbers from 0 to 1 "
                            "(e.g. 0,0.1,0.5,1)"),
    (["--reward-threshold", "nan"], "argument --reward-threshold: 'nan' is not a finite number"),
    (["--reward-threshold", "inf"], "argument --reward-threshold: 'inf' is not a finite number"),
    (["--pair", "g", "g"], "--pair g g: two different methods, please"),
])
def test_diagnose_options(files, capsys, option, message):
    line = error_line(capsys, diagnose_args(files, *option, "--out", str(files / "o")))
    assert line == f"boundary diagnose: error: {message}"
    assert not (files / "o").exists()


def test_seeds_names_are_read_as_written_and_never_blank(files, capsys):
    (files / "names.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"method": 1.0, "metric": "m", "seed": s, "value": v} for s, v in ((0, 1.0), (1, 2.0))]))
    assert cli(["seeds", str(files / "names.jsonl"), "--out", str(files / "o")]) == 0
    assert pd.read_csv(files / "o" / "seeds.csv", dtype=str)["method"].tolist() == ["1.0"]
    (files / "blank.jsonl").write_text('{"method": "a", "metric": "m", "seed": 0, "value": 1.0}\n'
                                       '{"method": null, "metric": "m", "seed": 1, "value": 2.0}\n')
    line = error_line(capsys, ["seeds", str(files / "blank.jsonl"), "--out", str(files / "o2")])
    assert line == f"boundary seeds: error: {files / 'blank.jsonl'}: blank method in row 2"


def test_a_missing_option_is_one_line(files, capsys):
    line = error_line(capsys, ["seeds", str(files / "long.csv")])
    assert line == "boundary seeds: error: the following arguments are required: --out"


# ----------------------------------------------------------------------------- --out

def test_out_that_is_a_file(files, capsys):
    (files / "afile").write_text("x")
    line = error_line(capsys, diagnose_args(files, "--out", str(files / "afile")))
    assert line == f"boundary diagnose: error: {files / 'afile'}: exists and is not a folder"


def test_out_that_holds_other_files_is_left_alone(files, capsys):
    (files / "mine").mkdir()
    (files / "mine" / "notes.txt").write_text("keep")
    line = error_line(capsys, ["seeds", str(files / "long.csv"), "--out", str(files / "mine")])
    assert line == (f"boundary seeds: error: {files / 'mine'}: not empty and not written by boundary seeds "
                    "(it would be replaced as a whole); give a new or empty folder")
    assert (files / "mine" / "notes.txt").read_text() == "keep"


def test_a_folder_the_command_did_not_write_is_never_replaced(files, capsys, tiny_model_dir):
    """import-base and the report's folders as diagnose's and seeds' --out: a user's file stops
    the command before any work, and stays."""
    (files / "mine").mkdir()
    (files / "mine" / "notes.txt").write_text("keep")
    line = error_line(capsys, ["import-base", "--source", str(tiny_model_dir), "--out", str(files / "mine")])
    assert line == (f"boundary import-base: error: {files / 'mine'}: not empty and not written by boundary "
                    "import-base (it would be replaced as a whole); give a new or empty folder")
    report = files / "report"
    (report / "tables").mkdir(parents=True)
    (report / "tables" / "notes.txt").write_text("keep")
    (report / "figures" / "a").mkdir(parents=True)  # a folder of the report's own: replaced
    (report / "figures" / ".boundary").write_text("boundary report\n")
    (files / "new" / "tables").mkdir(parents=True)
    (files / "new" / "figures").mkdir()
    with pytest.raises(BoundaryError) as err:
        artifacts.publish(files / "new", report, "boundary report")
    assert str(err.value) == (f"{report / 'tables'}: not empty and not written by boundary report (it would be "
                              "replaced as a whole); give a new or empty folder")
    assert (files / "mine" / "notes.txt").read_text() == "keep" == (report / "tables" / "notes.txt").read_text()
    assert (report / "figures" / "a").is_dir()  # nothing moved: every folder is checked first
    (report / "tables" / "notes.txt").unlink()
    artifacts.publish(files / "new", report, "boundary report")
    assert sorted(p.name for p in (report / "figures").iterdir()) == [".boundary"]


@pytest.mark.parametrize("out, why", [("/proc/boundary-out", "no such file or directory"),
                                      ("ro/out", "read-only file system")])
def test_an_out_that_cannot_be_written_says_why(files, capsys, monkeypatch, out, why):
    """Checked before the work; a read-only place (simulated: root may write anywhere) or one
    that cannot hold folders is its own reason, not "no space left on device"."""
    if out.startswith("ro"):
        out = str(files / out)
        real = artifacts.tempfile.mkdtemp

        def read_only(*args, dir=None, **kwargs):
            if str(dir).startswith(str(files / "ro")):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS))
            return real(*args, dir=dir, **kwargs)
        monkeypatch.setattr(artifacts.tempfile, "mkdtemp", read_only)
    for argv in (["seeds", str(files / "long.csv")], diagnose_args(files)):
        line = error_line(capsys, [*argv, "--out", out])
        assert line == f"boundary {argv[0]}: error: {out}: cannot be written: {why}"


def test_out_is_replaced_as_a_whole(files):
    out = files / "o"
    assert cli(["seeds", str(files / "long.csv"), "--pair", "b", "a", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [".boundary", "pairs.csv", "seeds.csv"]
    assert cli(["seeds", str(files / "long.csv"), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [".boundary", "seeds.csv"]  # no stale pairs.csv
    assert [p.name for p in files.iterdir() if p.name.startswith(".o.")] == []


def test_a_killed_write_leaves_scratch_that_the_next_run_removes(files):
    """A kill mid-write leaves --out as it was plus a hidden scratch folder, which the next run
    for the same --out removes."""
    out = files / "o"
    assert cli(["seeds", str(files / "long.csv"), "--out", str(out)]) == 0
    before = (out / "seeds.csv").read_text()
    code = ("import os, signal\nfrom boundary.core.artifacts import atomic_dir\n"
            f"with atomic_dir({str(out)!r}, 'boundary seeds') as tmp:\n"
            "    (tmp / 'seeds.csv').write_text('half')\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    killed = subprocess.run([sys.executable, "-c", code], env=ENV)
    assert killed.returncode == -signal.SIGKILL
    scratch = [p for p in files.iterdir() if p.name.startswith(".o.partial.")]
    assert len(scratch) == 1 and (out / "seeds.csv").read_text() == before
    assert cli(["seeds", str(files / "long.csv"), "--pair", "b", "a", "--out", str(out)]) == 0
    assert not scratch[0].exists() and (out / "pairs.csv").exists()


# ----------------------------------------------------------------------------- count files

def test_ids_are_read_verbatim_from_csv_and_jsonl(tmp_path):
    (tmp_path / "c.csv").write_text("prompt_id,n,c\n000,4,1\n0,4,2\n1.1,4,0\n1.10,4,3\nNA,4,1\n")
    assert read_table(tmp_path / "c.csv")["prompt_id"].tolist() == ["000", "0", "1.1", "1.10", "NA"]
    rows = [{"prompt_id": i, "n": 4, "c": 1} for i in ("000", "1.1", "1.10")]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert read_table(tmp_path / "c.jsonl")["prompt_id"].tolist() == ["000", "1.1", "1.10"]


@pytest.mark.parametrize("text, message", [
    ("prompt_id,n,c\na,4,1\n,4,2\n", "blank prompt_id in row 2"),
    ("", "cannot be read (EmptyDataError: No columns to parse from file)"),
    ("prompt_id,n\na,4\n", "missing column(s) c"),
])
def test_count_file_problems(tmp_path, text, message):
    (tmp_path / "c.csv").write_text(text)
    with pytest.raises(BoundaryError) as err:
        read_table(tmp_path / "c.csv", ["prompt_id", "n", "c"])
    assert str(err.value) == f"{tmp_path / 'c.csv'}: {message}"


def test_the_report_names_a_listed_input_that_is_gone_and_leaves_out_unlisted_ones(tmp_path):
    from boundary.analysis.report import find_counts

    listed = tmp_path / "eval" / "diagnostic" / "pba" / "seed0" / "counts.parquet"
    stale = tmp_path / "eval" / "diagnostic" / "old_method" / "seed0" / "counts.parquet"
    for path in (listed, stale):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"")
    assert find_counts(tmp_path, [str(listed)]) == {"diagnostic": {("pba", 0): listed}}
    with pytest.raises(BoundaryError) as err:
        find_counts(tmp_path, [str(listed), str(tmp_path / "eval/diagnostic/base/seed0/counts.parquet")])
    assert str(err.value) == f"{tmp_path}/eval/diagnostic/base/seed0/counts.parquet: file not found " \
                             "(the report summarises it)"


# ----------------------------------------------------------------------------- full disk

@pytest.mark.parametrize("code, why", [(errno.ENOSPC, "no space left on device"),
                                       (errno.EDQUOT, "disk quota exceeded")])
def test_a_full_disk_names_the_path(tmp_path, monkeypatch, code, why):
    def full(self, path, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
    with pytest.raises(BoundaryError) as err:
        write_table(SEEDS, tmp_path / "t.parquet")
    assert str(err.value) == f"{tmp_path / 't.parquet'}: cannot be written: {why}"
    assert list(tmp_path.iterdir()) == []  # no temp file left behind
    with pytest.raises(BoundaryError) as err:
        with atomic_dir(tmp_path / "d", "boundary seeds") as tmp:
            (tmp / "x").write_text("x")
            raise OSError(code, os.strerror(code))
    assert str(err.value) == f"{tmp_path / 'd'}: cannot be written: {why}"
    assert list(tmp_path.iterdir()) == []


def _limited(limit: int):
    def preexec():  # the kernel refuses writes past `limit` bytes (EFBIG), like a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


def boundary_cli(*argv, limit=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "boundary.cli", *argv], capture_output=True, text=True,
                          cwd=cwd, preexec_fn=_limited(limit) if limit else None,
                          env=ENV)


def test_seeds_on_a_full_disk(files):
    big = pd.concat([SEEDS.assign(metric=f"m{i}") for i in range(300)])
    big.to_csv(files / "big.csv", index=False)
    run = boundary_cli("seeds", str(files / "big.csv"), "--out", str(files / "o"), limit=4096)
    assert run.returncode == 1
    assert run.stderr.splitlines()[-1] == (f"boundary seeds: error: {files / 'o'}: cannot be written: "
                                           "file size limit exceeded")
    assert "Traceback" not in run.stderr
    assert not [p for p in files.iterdir() if p.name.startswith((".o", "o"))]


@contextlib.contextmanager
def file_size_limit(limit: int):
    """Writes in this process past `limit` bytes refused by the kernel (EFBIG, as on a full disk;
    Python ignores SIGXFSZ): the soft limit only, put back after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_pretrain_on_a_full_disk_leaves_no_model_folder(tmp_path, capsys):
    """The stage's own code in this process (a process's exit status and stderr on a full disk:
    the seeds test above)."""
    settings = {"task": {"seed": 0, "n_cells": 2}, "model": {"hidden": 32, "layers": 1, "heads": 2,
                                                             "intermediate": 64},
                "pretrain": {"steps": 2, "batch_prompts": 4, "lr": 1e-3, "warmup": 1, "seed": 0}}
    with stage_here(), file_size_limit(20_000):
        code = cli(["pretrain", "--settings", json.dumps(settings), "--out", str(tmp_path / "base")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert err.splitlines()[-1] == (f"boundary pretrain: error: {tmp_path / 'base'}: cannot be "
                                    "written: file size limit exceeded")
    assert list(tmp_path.iterdir()) == []  # no model folder without weights, no scratch


# ----------------------------------------------------------------------------- umask, run key

@pytest.mark.parametrize("mask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o002, 0o664, 0o775),
                                                        (0o077, 0o600, 0o700)])
def test_artifacts_get_the_umask(tmp_path, mask, file_mode, dir_mode):
    old = os.umask(mask)
    artifacts.umask.cache_clear()
    try:
        write_table(SEEDS, tmp_path / "t.csv")
        with atomic_dir(tmp_path / "d", "boundary seeds") as tmp:
            write_table(SEEDS, tmp / "t.parquet")
    finally:
        os.umask(old)
        artifacts.umask.cache_clear()
    assert (tmp_path / "t.csv").stat().st_mode & 0o777 == file_mode
    assert (tmp_path / "d").stat().st_mode & 0o777 == dir_mode
    assert (tmp_path / "d" / "t.parquet").stat().st_mode & 0o777 == file_mode


def test_run_key_depends_only_on_what_determines_the_weights(tiny_model_dir, tmp_path):
    from boundary.stages.train import run_key

    prompts = {"prompt": ["12+34="], "answer": ["1234"], "prompt_id": ["p0"]}
    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    (base / "pretrain.json").write_text(json.dumps({"final_loss": 1.0, "seconds": 10.0}))
    key = run_key(base, {"lr": 1e-3}, 0, prompts, None)
    (base / "pretrain.json").write_text(json.dumps({"final_loss": 1.0, "seconds": 99.0}))  # re-pretrained
    (base / ".boundary").write_text("boundary pretrain\n")
    (base / ".cache").mkdir()
    (base / ".cache" / "download.lock").write_text("stamp")
    assert run_key(base, {"lr": 1e-3}, 0, prompts, None) == key
    weights = next(base.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    assert run_key(base, {"lr": 1e-3}, 0, prompts, None) != key


def test_a_count_file_with_text_for_a_number_is_one_line(tmp_path):
    from boundary.readers.counts import counts_frame

    df = pd.DataFrame({"prompt_id": ["a", "b", "c"], "n": 4, "c": 1, "entropy": [0.5, None, "hot"]})
    with pytest.raises(BoundaryError) as err:
        counts_frame(df, "x.csv")
    assert str(err.value) == "x.csv: column entropy must hold numbers, not 'hot' (prompt_id c)"
    ok = counts_frame(df.iloc[:2], "x.csv")  # a blank entropy is "not measured"
    assert ok["entropy"].iloc[0] == 0.5 and np.isnan(ok["entropy"].iloc[1])
