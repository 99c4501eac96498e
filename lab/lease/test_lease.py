"""What a GPU lease carries in and out (lab/lease/lease_pack.py): every small artifact of a
run with Snakemake's record of it, by priority under the size limit, never model weights;
restored byte for byte with the mtimes packed, then dated now. The whole cycle, with Snakemake
on the smoke config, is lab/lease/lease_cycle_cpu.sh (minutes: not a test)."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest
from conftest import ROOT

PILOT = ROOT / "lab" / "studies" / "2026-11-29-qwen05b-pilot" / "qwen05b_pilot.yaml"
spec = importlib.util.spec_from_file_location("lease_pack", ROOT / "lab" / "lease" / "lease_pack.py")
lease_pack = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lease_pack)


def write(path: Path, size: int = 100, when: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))  # incompressible, like parquet
    if when is not None:
        os.utime(path, (when, when))
    return path


def record(path: str) -> Path:
    return write(lease_pack.record_path(lease_pack.METADATA, path), 50)


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A run's folder as a lease leaves it: small artifacts, samples, weights, one unfinished job."""
    monkeypatch.chdir(tmp_path)
    out = Path("results/r")
    old = time.time() - 3600
    for rel in ["splits/diagnostic.parquet", "regimes/regimes.parquet", "masks/pba.parquet",
                "train/grpo/seed0/log.parquet", "eval/diagnostic/grpo/seed0/counts.parquet",
                "logs/calibrate_base.log", "tables/headline.md"]:
        write(out / rel, 1000, old)
        record(str(out / rel))
    write(out / "rollouts/base_calibration.parquet", 300_000, old)
    write(out / "eval/diagnostic/grpo/seed0/samples.parquet", 400_000, old)
    write(out / "eval/math500/grpo/seed0/samples.parquet", 200_000, old)
    write(out / "models/base/model.safetensors", 50_000)
    write(out / "train/grpo/seed0/final/config.json", 500)
    write(out / "train/grpo/seed0/step30/optimizer.pt", 500)
    write(out / "eval/diagnostic/pba/seed0/counts.parquet", 1000)
    write(lease_pack.record_path(lease_pack.INCOMPLETE, str(out / "eval/diagnostic/pba/seed0/counts.parquet")), 10)
    record(str(out / "diagnostics"))  # a directory() output's record, keyed by the folder
    write(out / "diagnostics/summary.md", 100, old)
    return out


def pack(out: Path, dest: str, limit_mib: float) -> None:
    lease_pack.main(["pack", "--results", str(out), "--out", dest, "--limit-mib", str(limit_mib),
                     "--part-mib", "0.25"])


def manifest(dest: str) -> dict[str, list[str]]:
    lines = Path(dest, "lease_r.manifest").read_text().splitlines()
    kinds: dict[str, list[str]] = {}
    for line in lines:
        kind, _, rest = line.partition(" ")
        kinds.setdefault(kind, []).append(rest.split(" ")[0])
    return kinds


def checkout_copy(dest: Path) -> Path:
    """The checkout's tracked files (as they are in the working tree) copied into `dest`."""
    import subprocess

    dest.mkdir(parents=True, exist_ok=True)
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    tree = subprocess.run(["tar", "-c", "--null", "-T", "-", "-f", "-"], cwd=ROOT, input=files, check=True,
                          capture_output=True).stdout
    subprocess.run(["tar", "-x", "-f", "-"], cwd=dest, input=tree, check=True)
    return dest


def test_record_paths_are_where_snakemake_keeps_them(tmp_path):
    from snakemake.persistence.file import FilePersistence

    persistence = FilePersistence.__new__(FilePersistence)  # only its path arithmetic is used
    persistence._max_len = None
    for path in ["results/r/masks/pba.parquet", "results/r/" + "eval/a_long_benchmark_name/" * 12 + "c.parquet"]:
        assert lease_pack.record_path(tmp_path, path) == Path(persistence._record_path(str(tmp_path), path))


def test_a_pack_holds_the_small_artifacts_and_their_records_never_weights(run, capsys):
    pack(run, "back", limit_mib=60)
    packed = manifest("back")["packed"]
    assert "results/r/masks/pba.parquet" in packed and "results/r/diagnostics/summary.md" in packed
    assert "results/r/eval/math500/grpo/seed0/samples.parquet" in packed
    assert not [p for p in packed if "/models/" in p or "/final/" in p or "/step30/" in p]
    assert manifest("back")["unfinished"] == ["results/r/eval/diagnostic/pba/seed0/counts.parquet"]
    assert len(list(Path("back").glob("lease_r.tgz.*"))) >= 2  # 0.25 MiB parts
    assert "files of unfinished jobs left out" in capsys.readouterr().out


def test_over_the_limit_samples_go_first_and_are_named(run, capsys):
    pack(run, "back", limit_mib=1.5)  # a MiB for headers and records leaves 0.5 MiB of files
    kinds = manifest("back")
    # the diagnostic split's samples do not fit, so the smaller ones of lower priority stay out too
    assert kinds["left_out"] == ["results/r/eval/diagnostic/grpo/seed0/samples.parquet",
                                 "results/r/eval/math500/grpo/seed0/samples.parquet"]
    assert "results/r/rollouts/base_calibration.parquet" in kinds["packed"]
    assert "warning: 2 files over the 1.5 MiB limit left out" in capsys.readouterr().out
    pack(run, "back", limit_mib=1.2)
    kinds = manifest("back")
    assert "results/r/regimes/regimes.parquet" in kinds["packed"]
    assert "results/r/rollouts/base_calibration.parquet" not in kinds["packed"]


def test_a_restore_is_byte_for_byte_with_the_packed_mtimes_then_dated_now(run, tmp_path, monkeypatch):
    pack(run, str(tmp_path / "back"), limit_mib=60)
    files = {p: (p.read_bytes(), p.stat().st_mtime) for p in run.rglob("*") if p.is_file()}
    records = {p: p.read_bytes() for p in lease_pack.METADATA.rglob("*") if p.is_file()}
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    monkeypatch.chdir(fresh)
    lease_pack.main(["unpack", str(tmp_path / "back")])
    restored = Path(".snakemake/lease/restored.txt").read_text().split()
    for path in restored:
        data, mtime = files[Path(path)]
        assert Path(path).read_bytes() == data and Path(path).stat().st_mtime == pytest.approx(mtime, abs=1)
    assert all(Path(p).read_bytes() == data for p, data in records.items())
    assert not Path("results/r/models").exists()
    before = time.time()
    lease_pack.main(["touch", ".snakemake/lease/restored.txt"])
    assert all(Path(p).stat().st_mtime >= before - 1 for p in restored)


def test_a_changed_part_restores_nothing(run, tmp_path, monkeypatch):
    pack(run, str(tmp_path / "back"), limit_mib=60)
    part = sorted((tmp_path / "back").glob("lease_r.tgz.*"))[0]
    part.write_bytes(b"x" + part.read_bytes()[1:])
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    monkeypatch.chdir(fresh)
    with pytest.raises(SystemExit, match="not the SHA-256 lease_r.manifest names; nothing restored"):
        lease_pack.main(["unpack", str(tmp_path / "back")])
    assert not Path("results").exists()


def test_a_seeds_targets_are_its_training_logs_and_evaluations(capsys):
    lease_pack.main(["targets", "--configfile", str(ROOT / "tests" / "configs" / "smoke.yaml"), "--seed", "0"])
    targets = capsys.readouterr().out.split()
    assert "results/smoke/train/grpo/seed0/log.parquet" in targets
    assert "results/smoke/eval/testbed/early_stop/seed0/counts.parquet" in targets  # a checkpoint's
    assert "results/smoke/eval/diagnostic/base/seed0/counts.parquet" in targets
    assert not [t for t in targets if "seed1" in t or "/models/" in t or "/final" in t]


def test_a_seed_split_across_leases_by_method(capsys):
    """--methods: a seed's targets for some methods only (those evaluating their checkpoints go
    with them), `base` for the base's draw; together the parts are the whole seed. A method that
    is not the config's, or a checkpoint's evaluation without the method that trains it, is
    refused in one line."""
    smoke = str(ROOT / "tests" / "configs" / "smoke.yaml")

    def targets(*more):
        lease_pack.main(["targets", "--configfile", smoke, "--seed", "0", *more])
        return capsys.readouterr().out.split()

    whole, grpo, rest = targets(), targets("--methods", "grpo"), targets("--methods", "pba,pba_lora,base")
    assert "results/smoke/train/grpo/seed0/log.parquet" in grpo
    assert "results/smoke/eval/testbed/early_stop/seed0/counts.parquet" in grpo  # grpo's checkpoint
    assert not [t for t in grpo if "/base/" in t or "/pba/" in t or "_lora/" in t]
    assert "results/smoke/eval/diagnostic/base/seed0/counts.parquet" in rest
    assert sorted(grpo + rest) == sorted(whole)
    with pytest.raises(SystemExit, match=r"--methods ppo: not a method of .*smoke.yaml \(nor base\)$"):
        targets("--methods", "grpo,ppo")
    with pytest.raises(SystemExit, match="--methods early_stop: evaluates grpo's checkpoint: name that method too"):
        targets("--methods", "early_stop")


def test_the_data_a_lease_carries_under_data_and_elsewhere_in_the_checkout(tmp_path, monkeypatch, capsys):
    """data/ files go to .lease/data (lease.sh links data/ to it); the checkout's other files (the
    selection's subsamples under results/) to .lease/files at their paths (lease.sh copies them
    back); a file outside the checkout cannot travel: one warning line."""
    import yaml

    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load((ROOT / "lab" / "studies" / "2026-11-28-qwen15b-task-selection" / "qwen15b_select_gsm8k.yaml").read_text())
    outside = tmp_path.parent / f"{tmp_path.name}_outside.jsonl"
    config["data"].update(train={"path": "data/gsm8k/train.jsonl"},
                          diagnostic={"path": "results/qwen15b/candidates/gsm8k_sel_diagnostic.jsonl"},
                          benchmarks={"far": {"path": str(outside)}})
    Path("c.yaml").write_text(yaml.safe_dump(config))
    for path in ("data/gsm8k/train.jsonl", "results/qwen15b/candidates/gsm8k_sel_diagnostic.jsonl"):
        write(Path(path), 10)
    lease_pack.main(["data", "--configfile", "c.yaml", "--out", ".lease"])
    assert Path(".lease/data/gsm8k/train.jsonl").read_bytes() == Path("data/gsm8k/train.jsonl").read_bytes()
    assert Path(".lease/files/results/qwen15b/candidates/gsm8k_sel_diagnostic.jsonl").is_file()
    assert sorted(str(p) for p in Path(".lease").rglob("*") if p.is_file()) == [
        ".lease/data/gsm8k/train.jsonl", ".lease/files/results/qwen15b/candidates/gsm8k_sel_diagnostic.jsonl"]
    warning = [line for line in capsys.readouterr().out.splitlines() if "warning" in line]
    assert warning == [f"lease_in: warning: {outside}: outside the checkout, not carried (c.yaml's data; "
                       "the device has no such file)"]


def test_a_gguf_goes_in_slices_a_call_each_that_join_to_the_file(tmp_path):
    """lease_in.sh gguf FILE MIB DIR: DIR/NN/NAME.part_NN, one folder a device call, each at most
    MIB MiB, joined in name order (as lease.sh joins them) into FILE's bytes; a slice that would
    not fit a call beside the tracked tree is warned of in one line."""
    import subprocess

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(os.urandom(5 * 2**20 // 2))
    run = subprocess.run(["bash", "lab/lease/lease_in.sh", "gguf", str(gguf), "1", str(tmp_path / "s")],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    parts = sorted((tmp_path / "s").glob("*/m.gguf.part_*"))
    assert [p.parent.name + "/" + p.name for p in parts] == [f"{n:02d}/m.gguf.part_{n:02d}" for n in range(3)]
    assert b"".join(p.read_bytes() for p in parts) == gguf.read_bytes()
    assert max(p.stat().st_size for p in parts) == 2**20 and "warning" not in run.stdout
    run = subprocess.run(["bash", "lab/lease/lease_in.sh", "gguf", str(gguf), "63", str(tmp_path / "s")],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    warnings = [line for line in run.stdout.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith("lease_in: warning: the tracked tree (")
    assert "and a 63 MiB slice exceed the 64 MiB a call carries" in warnings[0]


def test_the_pilot_s_first_lease_command_makes_what_later_leases_carry(tmp_path):
    """The how-to's call 14 for the pilot's first lease (lab/lease/README.md):
    a dry run of its targets plans the calibration's shards and join, the regimes, the gate draws
    and both masks. (Its first draft named the masks alone, which read only the gate draws: the
    calibration would not have been made.)"""
    import re

    from test_workflow import dry_run_inputs, snakemake

    from boundary.core.config import load_config

    how_to = (ROOT / "lab" / "lease" / "README.md").read_text()
    call = next(line for line in how_to.splitlines() if line.startswith("| 14 |"))
    targets = re.findall(r"results/qwen05b_pilot/\S+?\.parquet", call)
    dry_run_inputs(tmp_path, load_config(PILOT))
    out = snakemake("-n", *targets, "--cores", "1", "--configfile", str(PILOT), cwd=tmp_path).stdout
    planned = set(re.findall(r"^rule (\w+):", out, flags=re.M)) | set(re.findall(r"^localrule (\w+):", out, flags=re.M))
    assert {"import_base", "splits", "calibrate_base_shard", "calibrate_base", "regimes", "gate_draws",
            "mask"} <= planned
    assert not planned & {"train_grpo", "train_pba", "train_random", "evaluate", "base_rollouts"}


def test_the_pilot_s_committed_carry_plans_a_seed_lease_without_remaking_its_calibration(tmp_path, monkeypatch):
    """lab/studies/2026-11-29-qwen05b-pilot/carry (lease 2's splits, regimes, masks and their
    records, no rollouts): restored into a copy of this checkout as lease.sh restores it (the
    base imported first, then the restored files dated), a dry run of seed 0 and the report
    plans training and evaluation and nothing of the calibration's chain. A change of the
    settings those stages are keyed by (the config's, or a rule's params) would remake them on
    the GPU, and fails here. (A package edit does not: a lease dates restored files after the
    checkout's, and Snakemake compares code inputs by date.) Needs ../shared/data
    and the 0.5B's GGUF (the splits' and the import's inputs, compared by content); the import
    itself is stood in for by its output folder, as a lease makes it before dating the rest."""
    import re
    import subprocess
    import sys

    from test_workflow import snakemake

    data, gguf = ROOT.parent / "shared" / "data", ROOT / "models" / "Qwen2.5-Coder-0.5B-Instruct.gguf"
    if not (data / "math500").is_dir() or not gguf.is_file():
        pytest.skip("needs ../shared/data and the 0.5B's GGUF (lab/models/qwen05b.sh): compared by content")
    checkout_copy(tmp_path)
    subprocess.run([sys.executable, "lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_candidates.py", "--data", str(data)], cwd=tmp_path,
                   check=True, capture_output=True)
    config = tmp_path / PILOT.relative_to(ROOT)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / gguf.name).symlink_to(gguf)
    monkeypatch.chdir(tmp_path)
    lease_pack.main(["unpack", "lab/studies/2026-11-29-qwen05b-pilot/carry"])
    (tmp_path / "results" / "qwen05b_pilot" / "models" / "base").mkdir(parents=True)
    lease_pack.main(["touch", ".snakemake/lease/restored.txt"])
    targets = subprocess.run([sys.executable, "lab/lease/lease_pack.py", "targets", "--configfile", str(config),
                              "--seed", "0"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()
    out = snakemake("-n", *targets, "results/qwen05b_pilot/report.html", "--cores", "1", "--resources", "gpu=1",
                    "--configfile", str(config), cwd=tmp_path).stdout
    planned = set(re.findall(r"^(?:local)?rule (\w+):", out, flags=re.M))
    assert {"train_grpo", "train_pba", "train_random", "evaluate", "report"} <= planned
    remade = planned & {"import_base", "calibrate_base_shard", "calibrate_base", "gate_draws", "regimes", "mask"}
    assert not remade, f"the pilot's carry is stale: a seed lease would remake {sorted(remade)}"


@pytest.mark.slow
def test_a_detached_run_outlives_its_call_and_the_next_call_waits_for_it_and_packs(tmp_path):
    """lease.sh --detach: the call that starts Snakemake may end (here: killed, as a device call's
    end kills its processes) while the run goes on in its own session; the next call with --detach
    waits on that run instead of starting another, then packs everything it made. An --override
    file reaches Snakemake (4 gate draws a prompt instead of the config's 8)."""
    import signal
    import subprocess
    import sys

    repo = checkout_copy(tmp_path / "repo")
    env = {**os.environ, "PYTHON": sys.executable, "LEASE_SITE": str(tmp_path / "site"),
           "BOUNDARY_GPU_LOCKS": str(tmp_path / "locks")}
    targets = ["results/smoke/regimes/regimes.parquet", "results/smoke/masks/pba.parquet"]
    (tmp_path / "override.yaml").write_text("gate: {G0: 4}\n")
    call = ["bash", "lab/lease/lease.sh", "--configfile", "tests/configs/smoke.yaml", "--override",
            str(tmp_path / "override.yaml"), "--cores", "2", "--budget", "400", "--detach", *targets]

    first = subprocess.Popen(call, cwd=repo, env={**env, "OUT": str(tmp_path / "out1")}, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    for line in first.stdout:
        if "running: " in line:  # started, and waiting on it
            break
    os.killpg(first.pid, signal.SIGKILL)  # the call ends here
    first.wait()
    pid = int((repo / ".snakemake/lease/detached.pid").read_text())
    os.kill(pid, 0)  # still running: the call's end did not reach it
    assert os.getsid(pid) != first.pid

    second = subprocess.run(call, cwd=repo, env={**env, "OUT": str(tmp_path / "out2")}, capture_output=True,
                            text=True, timeout=400)
    assert f"the detached run goes on (pid {pid})" in second.stdout, second.stdout
    assert "detached snakemake exit status 0" in second.stdout, second.stdout
    assert all((repo / t).is_file() for t in targets)
    assert (tmp_path / "out2" / "lease_smoke.manifest").is_file()
    assert "results/smoke/masks/pba.parquet" in (tmp_path / "out2" / "lease_smoke.manifest").read_text()
    logs = [p.read_text() for p in (repo / "results/smoke/logs").rglob("*.log") if "gate draws:" in p.read_text()]
    assert len(logs) == 1 and " x 4 draws x " in logs[0], logs


def test_an_override_that_names_the_run_or_the_base_is_refused_in_one_line(tmp_path):
    import subprocess

    (tmp_path / "o.yaml").write_text("run: elsewhere\n")
    done = subprocess.run(["bash", "lab/lease/lease.sh", "--configfile", "tests/configs/smoke.yaml", "--override",
                           str(tmp_path / "o.yaml")], cwd=ROOT, env={**os.environ, "OUT": str(tmp_path / "out")},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and not (tmp_path / "out").exists()
    assert done.stderr.strip() == (f"lease.sh: --override {tmp_path / 'o.yaml'}: sets run or base_model, "
                                   "which only --configfile names")


def test_a_later_call_of_a_hold_need_not_carry_a_wheel_folder_again(tmp_path):
    """A carry replaces the folders it names, so a folder left out of a later call is absent
    there: lease.sh goes on if this hold installed from it already, and refuses in one line a
    folder it never saw."""
    import subprocess
    import sys
    import zipfile

    wheels = tmp_path / "kit"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "leasecheck-0.1-py3-none-any.whl", "w") as whl:
        whl.writestr("leasecheck/__init__.py", "")
        whl.writestr("leasecheck-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: leasecheck\nVersion: 0.1\n")
        whl.writestr("leasecheck-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr("leasecheck-0.1.dist-info/RECORD", "")
    env = {**os.environ, "PYTHON": sys.executable, "LEASE_SITE": str(tmp_path / "site"), "OUT": str(tmp_path / "out")}

    def call(folder):
        return subprocess.run(["bash", "lab/lease/lease.sh", "--configfile", "tests/configs/smoke.yaml",
                               "--wheels", str(folder), "--setup"], cwd=ROOT, env=env, capture_output=True, text=True)

    first = call(wheels)
    assert first.returncode == 0 and (tmp_path / "site" / "leasecheck" / "__init__.py").is_file(), first.stdout
    (wheels / "leasecheck-0.1-py3-none-any.whl").unlink()
    wheels.rmdir()
    later = call(wheels)
    assert later.returncode == 0 and "installed by an earlier call of this hold" in later.stdout, later.stdout
    never = call(tmp_path / "other")
    assert never.returncode == 1 and f"--wheels {tmp_path / 'other'}: no such folder" in never.stdout, never.stdout


def test_a_lora_runs_state_travels_in_parts_newest_checkpoint_only(tmp_path, monkeypatch, capsys):
    """pack-checkpoints: of each run folder the newest complete checkpoint-N (one without trainer
    state is a kill mid-save) and its snapshots, and a finished run's adapter folders; parts of
    the size asked, a manifest of their SHA-256; lease_in.sh ckpt regroups them a call each;
    unpack-checkpoints restores them byte for byte and lists the restored results/ files; a
    changed part restores nothing."""
    import subprocess

    monkeypatch.chdir(tmp_path)
    key = Path("checkpoints/r/grpo/seed0/0123456789abcdef")
    old = write(key / "checkpoint-2/optimizer.pt", 300_000)
    write(key / "checkpoint-2/trainer_state.json", 100)
    newest = [write(key / "checkpoint-4" / name, 1_500_000 if name == "optimizer.pt" else 100)
              for name in ("adapter_model.safetensors", "optimizer.pt", "trainer_state.json")]
    write(key / "checkpoint-5/optimizer.pt", 100)  # killed mid-save: no trainer state
    snapshot = write(key / "snapshots/step3/adapter_model.safetensors", 200_000)
    adapter = [write(Path("results/r/train/grpo/seed1/final") / n, 1000) for n in
               ("adapter_config.json", "adapter_model.safetensors")]
    write(Path("results/r/train/pba/seed0/final/model.safetensors"), 1000)  # full weights: never
    lease_pack.main(["pack-checkpoints", "--checkpoints", "checkpoints/r", "--results", "results/r",
                     "--out", "back", "--part-mib", "0.25"])
    manifest = Path("back/ckpt_r.manifest").read_text()
    assert f"packed {key / 'checkpoint-4'}" in manifest and f"packed {key / 'snapshots'}" in manifest
    assert "checkpoint-2" not in manifest and "checkpoint-5" not in manifest and "pba" not in manifest
    assert "packed results/r/train/grpo/seed1/final" in manifest
    parts = sorted(Path("back").glob("ckpt_r.tgz.*"))
    assert len(parts) >= 4 and max(p.stat().st_size for p in parts) <= 0.25 * 2**20

    repo = tmp_path / "repo"  # lease_in.sh works at its checkout's root: a copy, not this one's .lease/
    (repo / "lab/lease").mkdir(parents=True)
    (repo / "lab/lease/lease_in.sh").write_bytes((ROOT / "lab/lease/lease_in.sh").read_bytes())
    subprocess.run(["bash", "lab/lease/lease_in.sh", "ckpt", str(tmp_path / "back"), "1"], cwd=repo, check=True,
                   capture_output=True)
    calls = sorted((repo / ".lease" / "ckpt").iterdir())
    assert len(calls) >= 2 and all(sum(f.stat().st_size for f in c.iterdir()) <= 2**20 for c in calls)
    device = tmp_path / "device"
    (device / "in").mkdir(parents=True)
    for c in calls:  # the device calls, one a folder
        for f in c.iterdir():
            (device / "in" / f.name).write_bytes(f.read_bytes())
    monkeypatch.chdir(device)
    lease_pack.main(["unpack-checkpoints", "in", "--list", "restored.txt"])
    for path in [*newest, snapshot, *adapter]:
        assert (device / path).read_bytes() == (tmp_path / path).read_bytes()
    assert not (device / old).exists()
    assert sorted(Path("restored.txt").read_text().split()) == sorted(map(str, adapter))
    assert Path("ckpt-runs.txt").read_text().split() == ["checkpoints/r/grpo/seed0"]  # whose state came in
    first = Path("in") / parts[0].name
    first.write_bytes(b"x" + first.read_bytes()[1:])
    with pytest.raises(SystemExit, match="missing or not the SHA-256"):
        lease_pack.main(["unpack-checkpoints", "in"])


def test_the_training_process_pattern_finds_the_train_rules_command_with_and_without_the_engine(tmp_path):
    """lease.sh finds a hold's training processes by command line (to stop them with a checkpoint
    before the hold ends, and to pack a checkpoint only when none runs). It must match the train
    rule's own command, which names `--own` when a colocated engine owns the GPU, in the form the
    process has under lease.sh's `boundary` shim (`python -m boundary.cli ...`): it once missed
    `--own`, so a hold's stop signal reached no process."""
    import re
    import subprocess
    import sys

    pattern = re.search(r"^TRAIN_RE='(.*)'$", (ROOT / "lab/lease/lease.sh").read_text(), re.M).group(1)
    shim = re.search(r"exec %s (-m boundary\.cli) ", (ROOT / "lab/lease/lease.sh").read_text()).group(1)
    for engine, own in (("generate", False), ("vllm", True)):
        (tmp_path / f"{engine}.yaml").write_text(f"train: {{gpus: 1, rollout_engine: {engine}}}\n")
        plan = subprocess.run(
            [sys.executable, "-m", "snakemake", "-n", "-p", "--forceall", "results/smoke/train/grpo/seed0/log.parquet",
             "--configfile", "tests/configs/smoke.yaml", str(tmp_path / f"{engine}.yaml")],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
        command = next(line for line in plan.stdout.splitlines() if " train --model " in line)
        command = command[command.index("boundary "):]
        assert (" --own train " in command) is own, command
        for form in (command, f"/usr/bin/python3 {shim} {command.removeprefix('boundary ')}"):
            found = subprocess.run(["grep", "-Eq", pattern], input=form, text=True)
            assert found.returncode == 0, (pattern, form)


def test_a_carried_run_that_starts_from_step_0_is_named_and_a_new_seed_beside_it_is_not(tmp_path, monkeypatch, capsys):
    """restarted: a hold that resumes seed 0 from carried state and starts seed 1 beside it. Only a
    job whose run came in carried and that logged a fresh start since the run began is named (its
    key differed: it would train from step 0 in silence); seed 1's fresh start is the design, and
    a log from before the run began (restored with the carry) says nothing about this hold."""
    monkeypatch.chdir(tmp_path)
    lease = Path(".snakemake/lease")
    lease.mkdir(parents=True)
    (lease / "ckpt-runs.txt").write_text("checkpoints/r/grpo/seed0\ncheckpoints/r/pba/seed0\n")
    logs = Path("results/r/logs/train")
    old = write(logs / "pba/seed0.log", when=time.time() - 600)
    old.write_text("train: starting in checkpoints/r/pba/seed0/k1; 150 steps\n")  # an earlier hold's log
    os.utime(old, (time.time() - 600, time.time() - 600))
    since = write(lease / "detached.pid", when=time.time() - 300)

    def log(rel, text):
        path = logs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    log("grpo/seed1.log", "train: starting in checkpoints/r/grpo/seed1/k1; 150 steps\n")  # new beside it
    log("grpo/seed0.log", "train: resuming from checkpoints/r/grpo/seed0/k1/checkpoint-55\n")
    lease_pack.main(["restarted", "--run", "r", "--since", str(since)])
    assert capsys.readouterr().out == ""
    log("grpo/seed0.log", "train: starting in checkpoints/r/grpo/seed0/k2; 150 steps\n")  # another key
    lease_pack.main(["restarted", "--run", "r", "--since", str(since)])
    assert capsys.readouterr().out.split() == ["checkpoints/r/grpo/seed0"]


def test_a_pinned_hold_refuses_a_checkout_whose_workflow_moved(tmp_path):
    """--pin COMMIT: a study whose training runs span holds keys their checkpoints by the package's
    code, so a hold from a checkout whose workflow/ differs from the pinned commit would train
    again from step 0; lease.sh refuses in one line before it installs or runs anything, naming
    the file and the command that restores it."""
    import subprocess

    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(repo)], check=True)
    for name in ("lease.sh", "lease_pack.py"):  # this checkout's lease tooling, committed or not
        (repo / "lab" / "lease" / name).write_bytes((ROOT / "lab" / "lease" / name).read_bytes())
    call = ["bash", "lab/lease/lease.sh", "--configfile", "tests/configs/smoke.yaml", "--pin"]
    env = {**os.environ, "OUT": str(tmp_path / "out")}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    edited = repo / "workflow" / "boundary" / "__init__.py"
    edited.write_text(edited.read_text() + "\n# an edit\n")
    moved = subprocess.run([*call, head], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert moved.returncode == 2, moved.stdout + moved.stderr
    assert moved.stderr.strip() == (f"lease.sh: --pin {head}: workflow/ differs from it (workflow/boundary/__init__.py); "
                                    f"restore it: git checkout {head} -- workflow/"), moved.stderr
    unknown = subprocess.run([*call, "0" * 40], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "no such commit" in unknown.stderr, unknown.stderr
    assert not (tmp_path / "out").exists()  # nothing ran, nothing packed


FAKE_TRAINER = r'''
import signal, sys, time
from pathlib import Path

args = sys.argv[1:]
out = args[args.index("--out") + 1]
resume = int(args[args.index("--resume") + 1])
log = Path(out.replace("/train/", "/logs/train/", 1) + ".log")
log.parent.mkdir(parents=True, exist_ok=True)
asked = []
signal.signal(signal.SIGTERM, lambda *_: asked.append(1))  # training/launch.py's StopRequest
with log.open("w") as f:
    print(f"train: resuming from checkpoints/r/m/k/checkpoint-{resume}; 12 steps" if resume
          else "train: starting in checkpoints/r/m/k; 12 steps", file=f, flush=True)
    for step in range(resume + 1, 13):
        time.sleep(1.0)
        stop = bool(asked)  # read at the step's end (on_step_end); the step's line is logged after it
        print("{'loss': '0', 'reward': '0.25', 'step_time': '1.0'}", file=f, flush=True)
        if stop:
            print(f"train: stopped after step {step} of 12 (SIGTERM)", file=f, flush=True)
            sys.exit(75)
'''


def test_a_training_job_stops_after_the_step_named_fresh_or_resumed(tmp_path):
    """--stop-train-at-step N: the watcher in the detached run's session signals each training
    process once its log shows step N-1 done (the checkpoint it resumed from plus a logged line a
    step), so it stops at step N's boundary (exit 75); a job first seen past N stops after the
    step it is in. Each signal is recorded (a later call then does not start the run again). Fake
    training processes under the train rule's command line, 1-s steps; lease.sh's own functions."""
    import re
    import subprocess
    import sys

    text = (ROOT / "lab/lease/lease.sh").read_text()
    functions = "\n".join(re.search(rf"^{name}\(\) {{\n.*?^}}\n", text, re.M | re.S).group(0)
                          for name in ("train_pids", "logged_steps", "watch_steps"))
    train_re = re.search(r"^TRAIN_RE=.*$", text, re.M).group(0)
    shim = tmp_path / "bin" / "boundary"
    shim.parent.mkdir()
    shim.write_text(f"#!{sys.executable}\n{FAKE_TRAINER}")
    shim.chmod(0o755)
    jobs = {"grpo_full/seed0": 0, "grpo/seed0": 2, "grpo/seed1": 6}  # resumed from checkpoint-N
    starts = "\n".join(f"{shim} --gpus 1 --own train --out results/r/train/{job} --resume {n} &"
                       for job, n in jobs.items())
    script = f"""{train_re}
detached=.snakemake/lease/detached
{functions}
mkdir -p .snakemake/lease
{starts}
watch_steps 4 & watcher=$!
for job in $(jobs -p); do [ "$job" = "$watcher" ] || {{ wait "$job"; echo "rc $?"; }}; done
kill $watcher
"""
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LEASE_TERM_AFTER": "0", "LEASE_POLL": "0.2"}, start_new_session=True)
    assert done.stdout.count("rc 75") == 3, done.stdout + done.stderr
    logs = {job: (tmp_path / f"results/r/logs/train/{job}.log").read_text() for job in jobs}
    assert "stopped after step 4 of 12" in logs["grpo_full/seed0"], logs
    assert logs["grpo_full/seed0"].count("{'loss'") == 4
    assert "stopped after step 4 of 12" in logs["grpo/seed0"], logs  # resumed after step 2
    assert "stopped after step 7 of 12" in logs["grpo/seed1"], logs  # resumed after step 6: the step it is in
    recorded = dict(line.rsplit(" ", 1) for line in (tmp_path / ".snakemake/lease/detached.stopped").read_text().splitlines())
    assert recorded == {"grpo_full/seed0": "3", "grpo/seed0": "3", "grpo/seed1": "6"}, recorded
    assert "(grpo_full/seed0) has logged step 3: asked to stop at its next step boundary" in done.stdout, done.stdout


def test_the_step_stop_and_its_company_need_a_detached_run(tmp_path):
    import subprocess

    for option in (["--stop-train-at-step", "30"], ["--after-run", "true"], ["--tag", "b"], ["--no-wait"]):
        done = subprocess.run(["bash", "lab/lease/lease.sh", "--configfile", "tests/configs/smoke.yaml", *option],
                              cwd=ROOT, env={**os.environ, "OUT": str(tmp_path / "out")}, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2 and done.stderr.strip() == f"lease.sh: {option[0]}: needs --detach", done.stderr
    bad = subprocess.run(["bash", "lab/lease/lease.sh", "--configfile", "tests/configs/smoke.yaml", "--detach",
                          "--stop-train-at-step", "0"], cwd=ROOT, env={**os.environ, "OUT": str(tmp_path / "out")},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--stop-train-at-step 0: not a step" in bad.stderr, bad.stderr
    assert not (tmp_path / "out").exists()


def test_a_full_fine_tuning_runs_checkpoint_never_travels(tmp_path, monkeypatch, capsys):
    """pack-checkpoints beside a full fine-tuning run stopped at a step (the bridge: checkpoint-30
    with the model's full weights and AdamW's moments, about 21 GB at 1.5B, and a full snapshot):
    its folder is left out, in one line; a LoRA run's state beside it is packed as before."""
    monkeypatch.chdir(tmp_path)
    full = Path("checkpoints/r/grpo_full/seed0/fedcba9876543210")
    for name in ("model.safetensors", "config.json", "optimizer.pt", "trainer_state.json"):
        write(full / "checkpoint-30" / name, 2000)
    write(full / "snapshots/step30/model.safetensors", 2000)
    lora = Path("checkpoints/r/grpo/seed1/0123456789abcdef")
    for name in ("adapter_config.json", "adapter_model.safetensors", "optimizer.pt", "trainer_state.json"):
        write(lora / "checkpoint-49" / name, 1000)
    write(lora / "snapshots/step30/adapter_model.safetensors", 1000)
    lease_pack.main(["pack-checkpoints", "--checkpoints", "checkpoints/r", "--out", "back"])
    said = capsys.readouterr().out
    assert f"lease_pack: {full / 'checkpoint-30'}: full weights (0.0 GiB), not packed" in said, said
    manifest = Path("back/ckpt_r.manifest").read_text()
    assert "grpo_full" not in manifest
    assert f"packed {lora / 'checkpoint-49'}" in manifest and f"packed {lora / 'snapshots'}" in manifest


def test_a_hold_that_only_evaluates_packs_no_checkpoint_parts(tmp_path):
    """--no-checkpoint-pack: a call whose run only evaluates restored adapters packs no parts (they
    would be the ones that went in); without it, a finished LoRA run's adapters are packed as
    parts to bring back. lease.sh's own pack_checkpoints, its training_now stubbed (no run)."""
    import re
    import subprocess
    import sys

    text = (ROOT / "lab/lease/lease.sh").read_text()
    function = re.search(r"^pack_checkpoints\(\) {\n.*?^}\n", text, re.M | re.S).group(0)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        write(tmp_path / "results/r/train/grpo/seed0/final" / name, 1000)
    (tmp_path / "lab/lease").mkdir(parents=True)
    (tmp_path / "lab/lease/lease_pack.py").write_bytes((ROOT / "lab/lease/lease_pack.py").read_bytes())

    def call(flag: str) -> str:
        script = f"""say() {{ echo "lease.sh: $*"; }}
training_now() {{ false; }}
PY={sys.executable} run=r ckpt_out=back-{flag or 'all'} no_ckpt_pack={flag}
{function}
pack_checkpoints
"""
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    said = call("1")
    assert "no checkpoint parts packed (--no-checkpoint-pack)" in said, said
    assert not (tmp_path / "back-1").exists()
    said = call("")
    assert "the checkpoint parts to bring back" in said, said
    assert sorted(p.name for p in (tmp_path / "back-all").iterdir())[:2] == ["ckpt_r.manifest", "ckpt_r.tgz.00"]
