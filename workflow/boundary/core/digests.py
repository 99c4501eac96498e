"""Content digests of the files a run reads and writes: data files, model folders, artifacts.

Snakemake reruns a job when an input is newer than its outputs, but a folder's mtime does not
change when the files inside are re-saved, and a file that is only a param (a data path) is
not compared at all. Rules therefore carry `digest(path)` as a param: a file's sha256, or a
folder's manifest (every file's relative path and sha256), so any change of content reruns
exactly the jobs that read it, and a touch or a copy reruns nothing.

Hashing a 15 GB model folder at every DAG build would cost minutes, so each file's sha256 is
cached under its stat signature (size, mtime, ctime, inode, device): a file is read again only
when its signature changes. Rewriting a file in place always changes its ctime (which no user
tool can set back), even where the size and mtime are kept, so a cached hash is never stale.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

CACHE = Path(".snakemake") / "boundary-digests"  # relative to the run's working directory
SKIP = {".snakemake_timestamp"}  # Snakemake's own mark in directory outputs
_RACY_NS = 2_000_000_000  # a file changed this recently may change again within one clock tick
_CHUNK = 1 << 20


def _signature(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _entry(path: Path) -> Path:
    return CACHE / hashlib.sha1(os.fsencode(path.absolute())).hexdigest()


def _cached(path: Path, signature: list[int]) -> str | None:
    try:
        entry = json.loads(_entry(path).read_text())
    except (OSError, ValueError):
        return None
    return entry.get("sha256") if entry.get("signature") == signature else None


def _store(path: Path, signature: list[int], sha: str) -> None:
    """Best effort: without a writable cache every digest is computed afresh (slower, as exact)."""
    if time.time_ns() - max(signature[1], signature[2]) < _RACY_NS:
        return
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=CACHE, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"path": str(path.absolute()), "signature": signature, "sha256": sha}, f)
        os.replace(tmp, _entry(path))
    except OSError:
        pass


def file_sha256(path: str | os.PathLike) -> str:
    """A file's sha256 (hex), from the cache while its stat signature is unchanged."""
    path = Path(path)
    signature = _signature(path.stat())
    sha = _cached(path, signature)
    if sha is None:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
        sha = h.hexdigest()
        _store(path, signature, sha)
    return sha


def manifest(folder: str | os.PathLike) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder` (symlinks followed)."""
    folder = Path(folder)
    files = {}
    for root, dirs, names in os.walk(folder, followlinks=True):
        dirs.sort()
        for name in sorted(names):
            if name not in SKIP:
                path = Path(root) / name
                files[path.relative_to(folder).as_posix()] = file_sha256(path)
    return files


def digest(path: str | os.PathLike) -> str:
    """What a rule's param holds for a path it reads: the content's digest; `missing` for a
    path that does not exist (yet: params are evaluated again when the job starts)."""
    path = Path(path)
    if path.is_dir():
        text = "".join(f"{name}\t{sha}\n" for name, sha in manifest(path).items())
        return "folder:" + hashlib.sha256(text.encode()).hexdigest()
    if path.is_file():
        return "sha256:" + file_sha256(path)
    return "missing"
