"""tests/zygote.py, which the test pipelines' `boundary` jobs fork from: a forked job keeps a
real process's streams, directory, environment, exit status, signals and death, and a job whose
import-time environment differs from the server's runs as the installed `boundary`."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import zygote


def probe_env(tmp_path, **extra) -> dict:
    """The environment of a test pipeline's job (the server started on first use), running
    zygote_probe.py's main, its log in tmp_path."""
    if not (env := zygote.server_env()):
        pytest.skip("no zygote server here (BOUNDARY_TEST_ZYGOTE=0)")
    return {**env, "BOUNDARY_ZYGOTE_ENTRY": "zygote_probe:main",
            "BOUNDARY_ZYGOTE_LOG": str(tmp_path / "jobs.log"), **extra}


def marks(path, expected: str, seconds: float = 20) -> list[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if any(line.startswith(expected) for line in lines):
            return lines
        time.sleep(0.05)
    raise AssertionError(f"{path}: no {expected!r} within {seconds} s")


def test_a_forked_job_has_the_callers_streams_directory_environment_and_status(tmp_path):
    run = subprocess.run(["boundary", "exit", str(tmp_path / "m"), "3"], cwd=tmp_path, capture_output=True, text=True,
                         env=probe_env(tmp_path, PROBE="mine"))
    assert (run.returncode, run.stdout, run.stderr) == (3, f"out {tmp_path} mine\n", "err\n")
    assert (tmp_path / "jobs.log").read_text().startswith("forked ")


def test_snakemake_forks_from_a_server_that_imported_none_of_this_package(tmp_path):
    """The smoke run's Snakemake parses its own (edited) copy of the workflow: its `boundary`
    modules must come from there, so its server imports Snakemake and not this package; the child
    runs as the installed script, with its path and folder."""
    run = subprocess.run(["snakemake", "modules", str(tmp_path / "m"), "snakemake.cli", "boundary", "torch"],
                         capture_output=True, text=True, env=probe_env(tmp_path))
    script = probe_env(tmp_path)["BOUNDARY_ZYGOTE_SNAKEMAKE_REAL"]
    assert run.stdout.split() == ["True", "False", "False", script, os.path.dirname(script)], run.stderr
    assert (tmp_path / "jobs.log").read_text().startswith("forked "), run.stderr


def test_the_installed_boundary_runs_where_an_import_time_variable_differs(tmp_path):
    env = probe_env(tmp_path)
    env["HF_HUB_OFFLINE"] = "0" if env.get("HF_HUB_OFFLINE") == "1" else "1"
    env.pop("BOUNDARY_ZYGOTE_ENTRY")  # the installed boundary has no probe: its own --version
    run = subprocess.run(["boundary", "--version"], capture_output=True, text=True, env=env)
    assert run.returncode == 0 and run.stdout.startswith("boundary "), run.stderr
    assert (tmp_path / "jobs.log").read_text().startswith("real (HF_HUB_OFFLINE differs)")


def test_what_the_imports_set_themselves_is_no_difference(tmp_path):
    """torch's inductor sets its cache folder at import: a job's environment with that value (a
    test process that imported torch after its server started) or without it (one that had not)
    forks all the same, and the job sees the folder set, as in a real process."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    for cache in (default_cache_dir(), None):
        env = probe_env(tmp_path)
        env.pop("TORCHINDUCTOR_CACHE_DIR", None)
        if cache:
            env["TORCHINDUCTOR_CACHE_DIR"] = cache
        run = subprocess.run(["boundary", "exit", str(tmp_path / "m"), "0"], capture_output=True, text=True, env=env)
        assert run.returncode == 0, run.stderr
    assert [line.split(" ")[0] for line in (tmp_path / "jobs.log").read_text().splitlines()] == ["forked", "forked"]


def test_sigterm_reaches_the_job_and_its_status_comes_back(tmp_path):
    client = subprocess.Popen(["boundary", "wait", str(tmp_path / "m")], env=probe_env(tmp_path))
    marks(tmp_path / "m", "started")
    client.send_signal(signal.SIGTERM)
    assert client.wait(20) == 75
    assert marks(tmp_path / "m", "signal")[-1] == f"signal {int(signal.SIGTERM)}"


def test_a_job_killed_by_a_signal_kills_its_caller_so(tmp_path):
    run = subprocess.run(["boundary", "die", str(tmp_path / "m")], env=probe_env(tmp_path))
    assert run.returncode == -signal.SIGKILL


def test_a_caller_killed_outright_takes_its_job_with_it(tmp_path):
    client = subprocess.Popen(["boundary", "wait", str(tmp_path / "m")], env=probe_env(tmp_path))
    pid = int(marks(tmp_path / "m", "started")[0].split()[1])
    client.kill()  # kill -9: nothing to forward, the server sees the connection close
    client.wait(20)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the job {pid} outlived its killed caller")
