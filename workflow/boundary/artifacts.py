"""Parquet artifacts: atomic writes and readers that fail with one clear line.

Every stage writes through `write_table` (temp file in the same folder, then rename), so an
interrupted job never leaves a half-written artifact that Snakemake would take as complete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

import pandas as pd

from boundary.errors import BoundaryError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _apply_umask(folder: Path) -> None:
    """mkdtemp and some writers create 0700/0600: give the tree the modes the user's umask
    would, so collaborators on a shared filesystem can read results."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [folder, *folder.rglob("*")]:
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp folder beside `path`; it replaces `path` as a whole only if the block
    succeeds, so a killed job never leaves a folder that looks complete."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        _apply_umask(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_table(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write a table atomically; the format follows the suffix (.parquet, .csv, .md, .tex)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        elif path.suffix == ".csv":
            df.to_csv(tmp, index=False)
        elif path.suffix == ".jsonl":
            df.to_json(tmp, orient="records", lines=True)
        else:
            raise ValueError(f"write_table: unsupported suffix {path.suffix!r} for {path}")


def write_text(text: str, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(obj, path: str | os.PathLike) -> None:
    write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", path)


def read_table(path: str | os.PathLike, columns: Iterable[str] = (), nonempty: bool = False) -> pd.DataFrame:
    """Read parquet, CSV or JSONL; a missing file, unknown type, missing column or (with
    `nonempty`) a file without rows is one line."""
    path = Path(path)
    if not path.exists():
        raise BoundaryError(f"{path}: file not found")
    readers = {".parquet": pd.read_parquet, ".csv": pd.read_csv,
               ".jsonl": lambda p: pd.read_json(p, lines=True),
               ".json": lambda p: pd.read_json(p, lines=True)}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise BoundaryError(f"{path}: unknown file type {path.suffix!r} (use parquet, csv or jsonl)")
    try:
        df = reader(path)
    except Exception as err:  # corrupt or unreadable file
        raise BoundaryError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None
    if nonempty and df.empty:
        raise BoundaryError(f"{path}: no rows")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise BoundaryError(f"{path}: missing column(s) {', '.join(missing)}")
    return df
