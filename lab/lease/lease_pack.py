"""Pack and restore a run's small artifacts across GPU leases (lab/lease/README.md).

A lease's machine keeps nothing, and files travel in and out in small, few pieces, so a study
runs as several Snakemake runs on several machines. Each carries the run's small artifacts
(every file of results/{run} but model weights: splits, calibration, regimes, masks, counts,
training logs, tables, figures, logs) with Snakemake's metadata of each
(.snakemake/metadata/: params, code checksums, input sets), so that the next run treats
those stages as done instead of redoing them.

  pack    --results results/RUN --out DIR [--limit-mib 60] [--part-mib 15]
          DIR/lease_RUN.tgz.00, .01, ... (parts of one tar.gz, mtimes kept) and
          DIR/lease_RUN.manifest (sha256 of every part; packed and left-out files). Files
          go in by priority until the limit: the small artifacts first, then the base's
          rollouts, then the diagnostic split's samples, then other samples; what does not
          fit is listed in one warning line and in the manifest.
  unpack  DIR [--list FILE]
          joins and checks the parts, extracts them here (mtimes as packed), and writes the
          restored paths to FILE (default .snakemake/lease/restored.txt).
  touch   FILE
          sets every path FILE lists to one new mtime: restored artifacts become newer than
          what this machine made before them (the base re-imported here, a data folder copied
          in), so Snakemake's mtime trigger does not rerun them; a change of params, code or
          input set still does (the metadata came with them).
  targets --configfile CFG --seed S [--methods M,...]
          the files one lease makes for seed S of every method: its training logs and every
          evaluation of that seed (the base's draw S too), one a line; --methods: only those
          methods (and the methods that evaluate their checkpoints), `base` for the base's draw,
          so that a seed too large for one lease is split across leases by method.

  pack-checkpoints --checkpoints checkpoints/RUN [--results results/RUN] --out DIR [--part-mib 15]
          a LoRA run's resumable state, which lives outside results/ (train.lora: adapter,
          optimizer, scheduler, random and trainer state; a few hundred MB at 1.5B): of every
          run folder under checkpoints/RUN its newest complete checkpoint-N and its step
          snapshots (the adapters of train.checkpoints, which reach results/ only when the run
          ends; never a checkpoint holding full weights, a full fine-tuning run's: said in one
          line); with --results, also every finished LoRA run's adapter folders
          (train/M/seedS/final and step*, those holding adapter_config.json: a later lease
          evaluates them without training again). As DIR/ckpt_RUN.tgz.00, ... and
          DIR/ckpt_RUN.manifest; nothing (and an old pack removed) when there is neither.
  unpack-checkpoints DIR [--list FILE]
          joins and checks those parts and extracts them (a run resumes only under its own key:
          the same settings, base files and code); FILE (default
          .snakemake/lease/ckpt-restored.txt) lists the restored results/ files, for `touch`,
          and ckpt-runs.txt beside it the runs (checkpoints/RUN/M/seedS) whose state came in.
  restarted --run RUN --since FILE [--carried FILE]
          of those runs, the ones whose job logged a start from step 0 after FILE's date (its
          key differed): one a line, for lease.sh to say so and stop that job alone.

Model weights never travel (results/RUN/models/, train/<method>/seed<s>/final and step<n>/,
*.safetensors, *.bin, *.pt, *.gguf). Snakemake does not remake a missing file whose
consumers are up to date, so a run given those targets (or the report's) leaves them missing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tarfile
import time
from base64 import urlsafe_b64decode, urlsafe_b64encode
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workflow"))
from boundary.core.digests import file_sha256  # noqa: E402

WEIGHTS = {".safetensors", ".bin", ".pt", ".pth", ".gguf"}
METADATA = Path(".snakemake/metadata")
INCOMPLETE = Path(".snakemake/incomplete")
MiB = 1 << 20


def record_path(root: Path, path: str) -> Path:
    """Where Snakemake's file persistence keeps the record of `path` (persistence/file.py:
    urlsafe base64 of the path, cut into name-sized pieces, all but the last prefixed '@')."""
    b64 = urlsafe_b64encode(path.encode()).decode()
    step = 254  # NAME_MAX 255 less one
    pieces = [b64[i:i + step] for i in range(0, len(b64), step)]
    return root.joinpath(*["@" + p for p in pieces[:-1]], pieces[-1])


def is_weights(rel: Path) -> bool:
    parts = rel.parts
    if parts[0] == "models" or rel.suffix in WEIGHTS:
        return True
    # train/<method>/seed<s>/<folder>/...: final, step<n> and any other model folder
    return parts[0] == "train" and len(parts) > 4


def tier(rel: Path) -> int:
    """Packing priority: 0 small artifacts, 1 the base's rollouts, 2 diagnostic samples, 3 rest."""
    if rel.name == "samples.parquet" or rel.parts[0] == "base_rollouts":
        return 2 if rel.parts[:2] == ("eval", "diagnostic") else 3
    if rel.parts[0] == "rollouts":
        return 1
    return 0


def candidates(results: Path) -> tuple[list[Path], list[Path]]:
    """(files to pack in priority order, files left out because a job writing them did not
    finish), paths relative to the working directory."""
    keep, unfinished = [], []
    for path in sorted(p for p in results.rglob("*") if p.is_file()):
        rel = path.relative_to(results)
        if is_weights(rel):
            continue
        if any(record_path(INCOMPLETE, str(q)).exists() for q in [path, *path.parents]):
            unfinished.append(path)
        else:
            keep.append(path)
    keep.sort(key=lambda p: (tier(p.relative_to(results)), p.stat().st_size))
    return keep, unfinished


def records(results: Path) -> list[Path]:
    """Snakemake's records of every output under results/RUN (a directory() output's is keyed by
    the folder; weights' records too: a record of a missing file makes nothing look present, and
    with them every job of the run keeps its full provenance)."""
    found = []
    prefix = f"{results}/"
    for rec in METADATA.rglob("*") if METADATA.is_dir() else []:
        if rec.is_file():
            pieces = [part.removeprefix("@") for part in rec.relative_to(METADATA).parts]
            try:
                path = urlsafe_b64decode("".join(pieces)).decode()
            except ValueError:
                continue  # not a record of Snakemake's
            if path.startswith(prefix):
                found.append(rec)
    return sorted(found)


def archive_in_parts(members, archive: Path, part_mib: float, compresslevel: int,
                     recursive: bool = True) -> tuple[int, list[Path]]:
    """`members` as one tar.gz (mtimes kept) cut into ARCHIVE.00, .01, ... of `part_mib` MiB; the
    whole archive is removed. Returns its size and the parts."""
    with tarfile.open(archive, "w:gz", compresslevel=compresslevel) as tar:
        for path in members:
            tar.add(str(path), recursive=recursive)
    size, parts, part = archive.stat().st_size, [], int(part_mib * MiB)
    with open(archive, "rb") as f:
        while chunk := f.read(part):
            name = archive.parent / f"{archive.name}.{len(parts):02d}"
            name.write_bytes(chunk)
            parts.append(name)
    archive.unlink()
    return size, parts


def join_parts(folder: Path, manifest: Path, archive: Path, nothing: str) -> None:
    """The parts `manifest` names, each checked against its SHA-256, joined into `archive`; a part
    missing or changed exits in one line ending in `nothing` (what is then not restored)."""
    parts = [line.split()[1:] for line in manifest.read_text().splitlines() if line.startswith("part ")]
    with open(archive, "wb") as joined:
        for name, digest in parts:
            part = folder / name
            if not part.is_file() or file_sha256(part) != digest:
                sys.exit(f"lease_pack: {part}: missing or not the SHA-256 {manifest.name} names; {nothing}")
            with open(part, "rb") as f:
                while chunk := f.read(16 * MiB):
                    joined.write(chunk)


def pack(args) -> None:
    results, out = Path(args.results), Path(args.out)
    if not results.is_dir():
        sys.exit(f"lease_pack: {results}: no such folder (run from the repository root)")
    run = results.name
    out.mkdir(parents=True, exist_ok=True)
    files, unfinished = candidates(results)
    budget = int(args.limit_mib * MiB) - MiB  # a MiB for the tar headers and the metadata records
    chosen, left, full = [], [], False
    for path in files:  # by priority, each tier's smallest first: past the first that does not
        size = path.stat().st_size + 1024  # fit, nothing of a lower priority goes in
        if size <= budget and not full:
            chosen.append(path)
            budget -= size
        else:
            left.append(path)
            full = full or tier(path.relative_to(results)) > 0
    members = chosen + records(results)
    for old in out.glob(f"lease_{run}.tgz.*"):
        old.unlink()
    size, parts = archive_in_parts(members, out / f"lease_{run}.tgz", args.part_mib, 6, recursive=False)
    lines = [f"run {run}", f"archive {size} bytes in {len(parts)} parts"]
    lines += [f"part {p.name} {file_sha256(p)}" for p in parts]
    lines += [f"packed {p}" for p in chosen]
    lines += [f"left_out {p} {p.stat().st_size}" for p in left]
    lines += [f"unfinished {p}" for p in unfinished]
    (out / f"lease_{run}.manifest").write_text("\n".join(lines) + "\n")
    print(f"lease_pack: {len(chosen)} files of results/{run} and {len(members) - len(chosen)} metadata records "
          f"in {len(parts)} parts, {size / MiB:.1f} MiB, in {out}")
    if left:
        print(f"lease_pack: warning: {len(left)} files over the {args.limit_mib} MiB limit left out "
              f"({sum(p.stat().st_size for p in left) / MiB:.1f} MiB): {' '.join(map(str, left))}")
    if unfinished:
        print(f"lease_pack: {len(unfinished)} files of unfinished jobs left out: {' '.join(map(str, unfinished))}")


def manifest_of(folder: Path) -> Path:
    found = sorted(folder.glob("lease_*.manifest"))
    if len(found) != 1:
        sys.exit(f"lease_pack: {folder}: {len(found)} lease_*.manifest files, expected one")
    return found[0]


def unpack(args) -> None:
    folder = Path(args.folder)
    manifest = manifest_of(folder)
    lines = manifest.read_text().splitlines()
    archive = folder / "joined.tgz.partial"
    try:
        join_parts(folder, manifest, archive, "nothing restored")
        with tarfile.open(archive, "r:gz") as tar:
            names = [m.name for m in tar.getmembers() if m.isfile()]
            bad = [n for n in names if n.startswith("/") or ".." in Path(n).parts
                   or not n.startswith(("results/", ".snakemake/metadata/"))]
            if bad:
                sys.exit(f"lease_pack: {manifest.name}: the archive holds {bad[0]}, outside results/ and "
                         ".snakemake/metadata/; nothing restored")
            tar.extractall(".", filter="data")  # mtimes as packed
    finally:
        archive.unlink(missing_ok=True)
    restored = [n for n in names if n.startswith("results/")]
    listing = Path(args.list)
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text("".join(f"{n}\n" for n in restored))
    left = sum(line.startswith("left_out ") for line in lines)
    print(f"lease_pack: restored {len(restored)} files and {len(names) - len(restored)} metadata records "
          f"from {manifest.name}" + (f" ({left} files had been left out when packed)" if left else ""))


def touch(args) -> None:
    now = time.time()
    paths = [Path(p) for p in Path(args.list).read_text().split("\n") if p]
    folders = set()
    for path in paths:
        if path.exists():
            os.utime(path, (now, now))
            folders.update(q for q in path.parents if q.parts and q.parts[0] == "results")
    for folder in folders:  # a directory() output's mtime is its own
        os.utime(folder, (now, now))
    print(f"lease_pack: {len(paths)} restored files dated now, newer than what this machine made before them")


def full_weights(checkpoint: Path) -> bool:
    """Whether a checkpoint holds the model's full weights (full fine-tuning: about 21 GB with
    its optimizer state at 1.5B), not a LoRA adapter (adapter_model.safetensors)."""
    return any(checkpoint.glob("model*.safetensors")) or any(checkpoint.glob("pytorch_model*.bin"))


def resumable(root: Path) -> list[Path]:
    """What a LoRA run needs to go on elsewhere: under each run folder (a checkpoint-N's parent)
    its newest complete checkpoint-N and its snapshots/ folder. A run whose checkpoint holds full
    weights is left where it is, said in one line: weights never travel."""
    members = []
    for run_dir in sorted({p.parent for p in root.rglob("checkpoint-*")}):
        done = [p for p in run_dir.glob("checkpoint-*") if (p / "trainer_state.json").exists()]
        if done:
            newest = max(done, key=lambda p: int(p.name.split("-")[1]))
            if full_weights(newest):
                size = sum(f.stat().st_size for f in newest.rglob("*") if f.is_file())
                print(f"lease_pack: {newest}: full weights ({size / 2**30:.1f} GiB), not packed: a full "
                      "fine-tuning run's state and snapshots stay on this machine")
                continue
            members.append(newest)
            if (run_dir / "snapshots").is_dir():
                members.append(run_dir / "snapshots")
    return members


def adapters(results: Path) -> list[Path]:
    """A finished LoRA run's policy folders (peft adapters, small; full weights never travel)."""
    return sorted(p.parent for p in results.glob("train/*/seed*/*/adapter_config.json"))


def pack_checkpoints(args) -> None:
    root, out = Path(args.checkpoints), Path(args.out)
    run = root.name
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob(f"ckpt_{run}.tgz.*"), out / f"ckpt_{run}.manifest"]:
        old.unlink(missing_ok=True)
    members = resumable(root) if root.is_dir() else []
    members += adapters(Path(args.results)) if args.results else []
    if not members:
        print(f"lease_pack: {root}: no resumable checkpoint or LoRA adapter to pack")
        return
    # level 1: a trained fp32 state hardly compresses
    size, parts = archive_in_parts(members, out / f"ckpt_{run}.tgz", args.part_mib, 1)
    lines = [f"checkpoints {run}", f"archive {size} bytes in {len(parts)} parts"]
    lines += [f"part {p.name} {file_sha256(p)}" for p in parts]
    lines += [f"packed {p}" for p in members]
    (out / f"ckpt_{run}.manifest").write_text("\n".join(lines) + "\n")
    print(f"lease_pack: {' '.join(str(m) for m in members)}: {size / MiB:.1f} MiB in {len(parts)} parts "
          f"of {args.part_mib:g} MiB, in {out}")


def unpack_checkpoints(args) -> None:
    folder = Path(args.folder)
    found = sorted(folder.glob("ckpt_*.manifest"))
    if len(found) != 1:
        sys.exit(f"lease_pack: {folder}: {len(found)} ckpt_*.manifest files, expected one")
    lines = found[0].read_text().splitlines()
    archive = folder / "joined_ckpt.tgz.partial"
    try:
        join_parts(folder, found[0], archive, "no checkpoint restored")
        with tarfile.open(archive, "r:gz") as tar:
            names = [m.name for m in tar.getmembers()]
            bad = [n for n in names if n.startswith("/") or ".." in Path(n).parts
                   or not n.startswith(("checkpoints/", "results/"))]
            if bad:
                sys.exit(f"lease_pack: {found[0].name}: the archive holds {bad[0]}, outside checkpoints/ and "
                         "results/; nothing restored")
            files = [m.name for m in tar.getmembers() if m.isfile() and m.name.startswith("results/")]
            tar.extractall(".", filter="data")
    finally:
        archive.unlink(missing_ok=True)
    listing = Path(args.list)
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text("".join(f"{n}\n" for n in files))
    runs = sorted({"/".join(Path(n).parts[:4]) for n in names
                   if n.startswith("checkpoints/") and len(Path(n).parts) > 4})  # checkpoints/RUN/M/seedS
    runs_file = listing.with_name("ckpt-runs.txt")
    runs_file.write_text("".join(f"{r}\n" for r in runs))
    packed = [line.split(maxsplit=1)[1] for line in lines if line.startswith("packed ")]
    print(f"lease_pack: restored {' '.join(packed)} from {found[0].name}")


def restarted(args) -> None:
    """The runs whose state an earlier lease carried in (ckpt-runs.txt) but whose job, since the
    run started (--since: a file dated then), logged a start from step 0: its key differed (code,
    settings or base files changed), so it would train again from nothing in silence. One
    checkpoints/RUN/M/seedS a line; a run carried in by no lease (another seed starting beside
    them) is not one of them."""
    carried = set(Path(args.carried).read_text().split()) if Path(args.carried).exists() else set()
    since = Path(args.since).stat().st_mtime
    logs = Path("results") / args.run / "logs" / "train"
    for log in sorted(logs.glob("*/seed*.log")):
        run = f"checkpoints/{args.run}/{log.parent.name}/{log.stem}"
        if run in carried and log.stat().st_mtime > since and any(
                line.startswith("train: starting in") for line in log.read_text(errors="replace").splitlines()):
            print(run)


def data(args) -> None:
    """The config's data files (train, diagnostic, benchmarks) copied under --out: those under
    data/ at the same relative paths (a data/ link followed: what a lease carries as its data
    folder), any other file of the checkout (e.g. results/qwen15b/candidates/*.jsonl, written
    here) to --out/files/<its path>, which lease.sh copies back to that path. A path outside the
    checkout cannot travel: one warning line each."""
    import shutil

    from boundary.core import settings
    from boundary.core.config import load_yaml, validate_config

    config = validate_config(load_yaml(args.configfile))
    if config["testbed"] is not None:
        return  # the testbed makes its own data
    splits = [*settings.SPLITS, *(f"bench_{b}" for b in settings.benchmarks(config))]
    for path in sorted({str(settings.dataset_spec(config, s)["path"]) for s in splits}):
        if Path(path).is_absolute() or ".." in Path(path).parts:
            print(f"lease_in: warning: {path}: outside the checkout, not carried ({args.configfile}'s data; "
                  "the device has no such file)")
            continue
        if not Path(path).is_file():
            raise SystemExit(f"lease_in: {path}: no such file ({args.configfile}'s data; link data/ first)")
        target = Path(args.out) / (path if path.startswith("data/") else Path("files", path))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        print(f"lease_in: {target} ({target.stat().st_size / 2**20:.1f} MiB)")


def targets(args) -> None:
    from boundary.core import settings
    from boundary.core.config import load_yaml, validate_config
    from boundary.core.names import BASE, DIAGNOSTIC

    config = validate_config(load_yaml(args.configfile))
    out, seed = f"results/{config['run']}", args.seed
    benches = [DIAGNOSTIC] + settings.benchmarks(config)
    methods = config["methods"]
    chosen = (set(methods) | {BASE}) if args.methods is None else set(args.methods.split(","))
    unknown = sorted(chosen - set(methods) - {BASE})
    if unknown:
        sys.exit(f"lease_pack: --methods {unknown[0]}: not a method of {args.configfile} (nor {BASE})")
    orphans = sorted(m for m in chosen - {BASE} if methods[m]["checkpoint_of"] not in (None, *chosen))
    if orphans:  # its policy is another method's checkpoint, which only that method's lease holds
        sys.exit(f"lease_pack: --methods {orphans[0]}: evaluates {methods[orphans[0]]['checkpoint_of']}'s "
                 "checkpoint: name that method too (the weights stay on the machine that trained them)")
    for method, spec in methods.items():
        # A checkpoint's evaluation goes with the method that trains it.
        if (method in chosen or spec["checkpoint_of"] in chosen) and seed in settings.seeds_of(config, method):
            if not spec["checkpoint_of"]:
                print(f"{out}/train/{method}/seed{seed}/log.parquet")
            for bench in benches:
                print(f"{out}/eval/{bench}/{method}/seed{seed}/counts.parquet")
    if BASE in chosen and seed < settings.base_seeds(config):
        for bench in benches:
            print(f"{out}/eval/{bench}/{BASE}/seed{seed}/counts.parquet")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--results", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--limit-mib", type=float, default=60.0)
    p.add_argument("--part-mib", type=float, default=15.0)
    p.set_defaults(func=pack)
    p = sub.add_parser("unpack")
    p.add_argument("folder")
    p.add_argument("--list", default=".snakemake/lease/restored.txt")
    p.set_defaults(func=unpack)
    p = sub.add_parser("touch")
    p.add_argument("list")
    p.set_defaults(func=touch)
    p = sub.add_parser("data")
    p.add_argument("--configfile", required=True)
    p.add_argument("--out", default=".lease")
    p.set_defaults(func=data)
    p = sub.add_parser("pack-checkpoints")
    p.add_argument("--checkpoints", required=True)
    p.add_argument("--results")
    p.add_argument("--out", required=True)
    p.add_argument("--part-mib", type=float, default=15.0)
    p.set_defaults(func=pack_checkpoints)
    p = sub.add_parser("unpack-checkpoints")
    p.add_argument("folder")
    p.add_argument("--list", default=".snakemake/lease/ckpt-restored.txt")
    p.set_defaults(func=unpack_checkpoints)
    p = sub.add_parser("restarted")
    p.add_argument("--run", required=True)
    p.add_argument("--since", required=True)
    p.add_argument("--carried", default=".snakemake/lease/ckpt-runs.txt")
    p.set_defaults(func=restarted)
    p = sub.add_parser("targets")
    p.add_argument("--configfile", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--methods", help="comma-separated: only these methods' targets (and the base's draw if "
                   "`base` is named; default: every method and the base)")
    p.set_defaults(func=targets)
    args = ap.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
