"""Content digests: the inputs a run reads from outside (data files, the base model's source)
and the artifacts it writes.

Snakemake reruns a job when an input file is newer than its outputs, but a data path is only
a param, and a folder's mtime does not change when the files inside are re-saved. Rules that
read such a path carry `digest(path)` as a param (a file's sha256, or a folder's manifest of
every file's path and sha256): any change of content reruns exactly the jobs that read it,
and a touch or a copy reruns nothing.

The pipeline's own artifacts are recorded as written (`record`, called by the atomic writers
in a workflow run); one changed by hand afterwards (`changed_since_written`) is named in one
line before anything runs, and never overwritten or used in silence.

Hashing a 15 GB model folder at every DAG build would cost minutes, so each file's sha256 is
kept under its stat signature (size, mtime, ctime, inode) and read again only when
the signature changes. Rewriting a file in place always changes its ctime, which no user tool
can set back, even where size and mtime are kept: a kept hash is never stale. Writers record
while they write, so the workflow never hashes a model it made.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from boundary.core.errors import BoundaryError

# The store: set by the workflow (common.smk) for itself and its jobs. Unset (a stage run by
# hand, the analysis commands): nothing is kept or recorded, and digests are computed afresh.
ENV = "BOUNDARY_DIGESTS"
SKIP = {".snakemake_timestamp"}  # Snakemake's own mark in directory outputs
_RACY_NS = 2_000_000_000  # a file changed this recently may change again within one clock tick
_CHUNK = 1 << 20


def _store() -> Path | None:
    where = os.environ.get(ENV)
    return Path(where) if where else None


def _entry(kind: str, path: Path) -> Path | None:
    store = _store()
    return store / kind / hashlib.sha1(os.fsencode(path.absolute())).hexdigest() if store else None


def _read(kind: str, path: Path) -> dict:
    entry = _entry(kind, path)
    try:
        return json.loads(entry.read_text()) if entry else {}
    except (OSError, ValueError):
        return {}


def _write(kind: str, path: Path, value: dict) -> None:
    """Best effort: without a writable store every digest is computed afresh (slower, as exact)."""
    entry = _entry(kind, path)
    if entry is None:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"path": str(path.absolute()), **value}, f)
        os.replace(tmp, entry)
    except OSError:
        pass


def _signature(st: os.stat_result) -> list[int]:
    # No device number: entries are keyed by path already, and an NFS client's differs from
    # host to host (a cluster node's record would not match on the login node).
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def file_sha256(path: str | os.PathLike, written: bool = False) -> str:
    """A file's sha256 (hex), kept under its stat signature. `written`: the caller has just
    written it whole, so its signature is kept even though it is recent."""
    path = Path(path)
    try:
        signature = _signature(path.stat())
        kept = _read("files", path)
        if kept.get("signature") == signature:
            return kept["sha256"]
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    except OSError as err:
        raise BoundaryError(f"{path}: cannot be read ({err.strerror or type(err).__name__})") from None
    sha = h.hexdigest()
    if written or time.time_ns() - max(signature[1], signature[2]) > _RACY_NS:
        _write("files", path, {"signature": signature, "sha256": sha})
    return sha


def manifest(folder: str | os.PathLike, written: bool = False) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder` (symlinks followed)."""
    folder = Path(folder)
    files = {}
    for root, dirs, names in os.walk(folder, followlinks=True):
        dirs.sort()
        for name in sorted(names):
            if name not in SKIP:
                path = Path(root) / name
                files[path.relative_to(folder).as_posix()] = file_sha256(path, written)
    return files


def digest(path: str | os.PathLike, written: bool = False) -> str:
    """A path's content as one string: `sha256:<hex>` for a file, `folder:<hex>` (over the
    manifest) for a folder, `missing` for nothing there yet (a rule's params are evaluated
    again when its job starts)."""
    path = Path(path)
    if path.is_dir():
        text = "".join(f"{name}\t{sha}\n" for name, sha in manifest(path, written).items())
        return "folder:" + hashlib.sha256(text.encode()).hexdigest()
    if path.is_file():
        return "sha256:" + file_sha256(path, written)
    return "missing"


def record(path: str | os.PathLike) -> None:
    """Keep what the pipeline has just written at `path` (after its atomic rename)."""
    if _store() is not None:
        path = Path(path)
        _write("written", path, {"digest": digest(path, written=True)})


def changed_since_written(path: str | os.PathLike) -> bool:
    """Whether an artifact the pipeline recorded now holds something else. A missing one is
    not changed: Snakemake makes it again."""
    path = Path(path)
    kept = _read("written", path)
    return bool(kept) and path.exists() and digest(path) != kept["digest"]
