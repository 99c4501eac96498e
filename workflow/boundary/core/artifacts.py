"""Artifacts: atomic writes of files and folders, and readers that fail with one clear line.

Every stage writes through `write_table` / `atomic_path` (temp file in the same folder, then
rename) or `atomic_dir` (temp folder beside the target, then swapped in whole), so an
interrupted job never leaves a half-written artifact that Snakemake would take as complete,
and a rerun never leaves an earlier run's files beside its own. Files and folders get the
user's umask (mkstemp and mkdtemp alone would make them private), and a full disk or quota
is one line naming the path that could not be written.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from boundary.core import digests
from boundary.core.errors import BoundaryError

# Columns read verbatim as text from CSV and JSONL: "000" stays "000", "1.10" stays "1.10".
ID_COLUMNS = ("prompt_id",)
_FULL = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
         errno.EFBIG: "file size limit exceeded"}
_FULL_TEXT = re.compile(r"No space left on device|Disk quota exceeded|File too large|os error (28|122|27)\b")


# ----------------------------------------------------------------------------- permissions

@functools.cache
def umask() -> int:
    """The process umask, read without changing it (os.umask can only set it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # no /proc: set and restore (at import-time use only)
    os.umask(mask)
    return mask


def _as_created(path: Path, folder: bool) -> None:
    """Give a mkstemp/mkdtemp path the mode open()/mkdir() would have (they make 0600/0700)."""
    os.chmod(path, (0o777 if folder else 0o666) & ~umask())


def _as_created_tree(folder: Path) -> None:
    """The same for a whole tree: some writers (temp-file downloads) create 0600 files too."""
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            _as_created(path, folder=path.is_dir())


# ----------------------------------------------------------------------------- full disk

def storage_full(err: BaseException, near: str | os.PathLike | None = None) -> str | None:
    """Why `err` means the storage is full ("no space left on device", ...), or None.

    Writers report it as OSError errno, as text (pyarrow, safetensors), or not at all
    (torch's zip writer): then, for an error without an errno, a folder `near` on a real file
    system (not /proc) with no free blocks left decides."""
    code = getattr(err, "errno", None)
    if code in _FULL:
        return _FULL[code]
    match = _FULL_TEXT.search(str(err))
    if match:
        text = match.group(0)
        return next((v for k, v in _FULL.items() if os.strerror(k) == text or f"os error {k}" == text),
                    _FULL[errno.ENOSPC])
    if near is not None and code is None:
        try:
            folder = Path(near)
            while not folder.exists() and folder != folder.parent:
                folder = folder.parent
            space = os.statvfs(folder)
            if space.f_blocks > 0 and space.f_bavail == 0:
                return _FULL[errno.ENOSPC]
        except OSError:
            pass
    return None


class Unwritable(BoundaryError):
    def __init__(self, path, why: str):
        super().__init__(f"{path}: cannot be written: {why}")
        self.why = why


class StorageFull(Unwritable):
    pass


@contextmanager
def storage_errors(path: str | os.PathLike) -> Iterator[None]:
    """Turn a full disk or quota inside the block into one line naming `path` (the outermost
    such block names it: the output a user asked for, not a temp file inside it)."""
    try:
        yield
    except Unwritable as err:
        raise type(err)(path, err.why) from None
    except BoundaryError:
        raise
    except Exception as err:
        why = storage_full(err, path)
        if why is None:
            raise
        raise StorageFull(path, why) from None


@contextmanager
def creating(path: str | os.PathLike) -> Iterator[None]:
    """Making the files and folders of `path`: a full disk, or a place that is read-only, does
    not exist or refuses us, is one line naming `path` and what the system said."""
    with storage_errors(path):
        try:
            yield
        except OSError as err:
            if storage_full(err) is not None:
                raise
            raise Unwritable(path, (err.strerror or str(err)).lower()) from None


# ----------------------------------------------------------------------------- atomic files

@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    with creating(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    try:
        _as_created(Path(tmp), folder=False)
        with storage_errors(path):
            yield Path(tmp)
        with creating(path):
            os.replace(tmp, path)
        record(path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_table(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write a table atomically; the format follows the suffix (.parquet, .csv, .jsonl)."""
    path = Path(path)
    if path.suffix not in (".parquet", ".csv", ".jsonl"):
        raise ValueError(f"write_table: unsupported suffix {path.suffix!r} for {path}")
    with atomic_path(path) as tmp:
        if path.suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        elif path.suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_json(tmp, orient="records", lines=True)


def write_text(text: str, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(obj, path: str | os.PathLike) -> None:
    write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", path)


# ----------------------------------------------------------------------------- atomic folders

_PARTIAL = "partial"


def _scratch_name(path: Path, kind: str) -> str:
    return f".{path.name}.{kind}.{os.getpid()}@{socket.gethostname()}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_scratch(path: Path) -> None:
    """Remove scratch folders beside `path` left by killed processes of this host."""
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.{_PARTIAL}\.(\d+)@(.*)\.[^.]+$")
    host = socket.gethostname()
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return
    for entry in siblings:
        m = pattern.match(entry.name)
        if m and m.group(2) == host and not _alive(int(m.group(1))):
            shutil.rmtree(entry, ignore_errors=True)


@contextmanager
def scratch_dir(path: str | os.PathLike) -> Iterator[Path]:
    """A fresh hidden folder beside `path` (the user's umask), removed when the block ends.

    Its name holds this process's id and host, so the next call for the same `path` removes
    one that a killed process left behind."""
    path = Path(path)
    with creating(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_scratch(path)
        tmp = Path(tempfile.mkdtemp(prefix=_scratch_name(path, _PARTIAL), dir=path.parent))
    try:
        _as_created(tmp, folder=True)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2); False where the system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


MARKER = ".boundary"  # names the command that wrote a folder: it may replace that folder


def output_folder(path: str | os.PathLike, owner: str) -> Path:
    """`path` as a folder that `atomic_dir(path, owner)` may replace; otherwise one line.

    An existing folder is replaced only if it is empty or `owner` (the command, such as
    "boundary diagnose") wrote it, so `--out ~/data` can never wipe a user's files: the one
    "is this folder ours" check. Its parent must take new folders (checked now, so a bad
    `--out` fails before the work)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BoundaryError(f"{path}: exists and is not a folder")
    if path.is_dir() and any(path.iterdir()):
        marker = path / MARKER
        written_by = marker.read_text().strip() if marker.is_file() else None
        if written_by != owner:
            raise BoundaryError(f"{path}: not empty and not written by {owner} (it would be replaced "
                                "as a whole); give a new or empty folder")
    with creating(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=_scratch_name(path, "probe"), dir=path.parent))
    return path


def _swap_in(tmp: Path, path: Path) -> None:
    """Put the finished folder `tmp` at `path`; an existing `path` is exchanged with it in one
    rename (it is then at `tmp`, for the caller's scratch folder to remove)."""
    with creating(path):
        if not path.exists():
            os.rename(tmp, path)
        elif not _exchange(tmp, path):  # no renameat2: move the old folder aside first
            aside = Path(tempfile.mkdtemp(prefix=_scratch_name(path, _PARTIAL), dir=path.parent))
            os.rename(path, aside / path.name)
            os.rename(tmp, path)
            shutil.rmtree(aside, ignore_errors=True)
        record(path)


def record(path: Path) -> None:
    """Keep the digest of an artifact just put in place (in a workflow run; core/digests.py),
    unless it lies in a scratch folder that is yet to be moved into place as a whole."""
    if not any(part.startswith(".") and f".{_PARTIAL}." in part for part in path.parent.absolute().parts):
        digests.record(path)


def record_tree(path: Path) -> None:
    """`record` for a file or folder moved into place, and each file inside a folder (a rule
    may name them one by one)."""
    record(path)
    if path.is_dir():
        for inner in sorted(path.rglob("*")):
            if inner.is_file():
                record(inner)


@contextmanager
def atomic_dir(path: str | os.PathLike, owner: str) -> Iterator[Path]:
    """Yield an empty temp folder beside `path`; if the block succeeds it replaces `path` as a
    whole, so `path` holds exactly this run's files (nothing of an earlier run), and a marker
    saying that `owner` wrote it.

    An existing folder is exchanged with the new one in one rename and then removed; a kill
    before that leaves `path` as it was (and a scratch folder that the next call removes).
    A file at `path`, a folder the owner did not write (see `output_folder`), or a full disk
    is one line naming `path`."""
    path = output_folder(path, owner)
    with scratch_dir(path) as tmp:
        with storage_errors(path):
            yield tmp
            (tmp / MARKER).write_text(owner + "\n")
        _as_created_tree(tmp)
        _swap_in(tmp, path)


def publish(tmp: Path, out: str | os.PathLike, owner: str) -> None:
    """Move the files and folders of a finished folder `tmp` into `out`: each folder replaces
    its namesake as a whole, as `atomic_dir` does (only where `owner` wrote it: all are
    checked before anything moves), each file its namesake."""
    out = Path(out)
    entries = sorted(tmp.iterdir())
    for entry in entries:
        if entry.is_dir():
            output_folder(out / entry.name, owner)
    with creating(out):
        out.mkdir(parents=True, exist_ok=True)
        for entry in entries:
            if entry.is_dir():
                (entry / MARKER).write_text(owner + "\n")
                _as_created_tree(entry)
                _swap_in(entry, out / entry.name)
                record_tree(out / entry.name)  # a rule may name the files inside one by one
            else:
                os.replace(entry, out / entry.name)
                record(out / entry.name)


# ----------------------------------------------------------------------------- reading

class _Number(float):
    """A JSON number that keeps the text it was written as: a text column reads `7.50` as
    "7.50", not "7.5"."""

    def __new__(cls, text: str):
        number = super().__new__(cls, text)
        number.text = text
        return number


def _as_text(value):
    """A value of a text column as written: numbers as their digits (a 20-digit integer is not
    rounded, "7" does not become "7.0"); strings, nulls, lists and objects as they are."""
    if isinstance(value, _Number):
        return value.text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return value


def _kind(value) -> str:
    return ("array" if isinstance(value, list) else "string" if isinstance(value, str) else
            "null" if value is None else "boolean" if isinstance(value, bool) else "number")


def _json_error(path: Path, line: int, err: json.JSONDecodeError) -> BoundaryError:
    return BoundaryError(f"{path}: line {line}: not valid JSON ({err.msg}, column {err.colno})")


def json_records(path: str | os.PathLike) -> list[dict]:
    """The objects of a JSON-lines file, or of a file holding one JSON array of objects (or one
    object over several lines); a UTF-8 BOM is skipped. What is not a JSON object is one line
    giving its line (or, in an array, its item) number."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise BoundaryError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None
    body = text.lstrip()
    skipped = text[:len(text) - len(body)].count("\n")  # blank lines before the JSON
    if body.startswith("["):  # one array (a .json export), not JSON lines
        try:
            records = json.loads(body, parse_float=_Number)
        except json.JSONDecodeError as err:
            raise _json_error(path, err.lineno + skipped, err) from None
        for i, row in enumerate(records, 1):
            if not isinstance(row, dict):
                raise BoundaryError(f"{path}: item {i} of the array: a JSON {_kind(row)}, not an object")
        return records
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, parse_float=_Number)
        except json.JSONDecodeError as err:
            if not records:  # perhaps one object written over several lines
                try:
                    whole = json.loads(body, parse_float=_Number)
                except json.JSONDecodeError:
                    whole = None
                if isinstance(whole, dict):
                    return [whole]
            raise _json_error(path, number, err) from None
        if not isinstance(row, dict):
            raise BoundaryError(f"{path}: line {number}: a JSON {_kind(row)}, not an object "
                                "(one object per line, or one array of objects)")
        records.append(row)
    return records


def json_columns(path: str | os.PathLike) -> list[str]:
    """Column names of a JSON table: the keys of its first object."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8-sig") as f:
            first = next((line for line in f if line.strip()), "")
    except (OSError, UnicodeDecodeError) as err:
        raise BoundaryError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None
    try:
        row = json.loads(first) if first.strip() else None
    except json.JSONDecodeError:  # an array, or one object over several lines
        row = None
    if not isinstance(row, dict):
        records = json_records(path)
        row = records[0] if records else {}
    return list(row)


def read_json(path: str | os.PathLike, types: dict | None = None, text: Iterable[str] = ()) -> pd.DataFrame:
    """A JSON-lines file (or one array of objects) as a table: every column, or with `types`
    ({column: pyarrow type, or None to infer}) those columns only, absent ones as nulls.
    Columns in `text` are kept as written (`_as_text`); the others take their JSON types.

    With `types`, Arrow's multithreaded reader goes first (about 1 s per million short
    rows); Python's json where it refuses the file (types that vary between lines, numbers
    in a text column, an array, a bad line: then named by its number)."""
    path, text = Path(path), set(text)
    if types is not None:
        try:
            return _read_json_arrow(path, types, text)
        except Exception:  # pyarrow.ArrowInvalid and kin: the exact reader below says why
            pass
    records = json_records(path)
    if types is not None:
        records = [{k: r.get(k) for k in types} for r in records]
    for record in records:
        for k in text.intersection(record):
            record[k] = _as_text(record[k])
    df = pd.DataFrame.from_records(records, columns=list(types) if types is not None else None)
    for k in text.intersection(df.columns):
        df[k] = df[k].astype(object).where(df[k].notna(), None)
    return df


def _read_json_arrow(path: Path, types: dict, text: set) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.json as pj

    schema = {k: pa.string() if k in text else t for k, t in types.items() if k in text or t is not None}
    table = pj.read_json(path, read_options=pj.ReadOptions(block_size=1 << 24),
                         parse_options=pj.ParseOptions(explicit_schema=pa.schema(schema),
                                                       unexpected_field_behavior="ignore"
                                                       if len(schema) == len(types) else "infer"))
    df = table.select([c for c in table.column_names if c in types]).to_pandas(types_mapper=_strings)
    for k in types:
        if k not in df:
            df[k] = None
    return df[list(types)]


def _strings(dtype):
    import pyarrow as pa
    return pd.StringDtype("pyarrow") if dtype in (pa.string(), pa.large_string()) else None


def _read_csv(path: Path, text: Iterable[str]) -> pd.DataFrame:
    text = list(text)
    df = pd.read_csv(path, dtype={c: str for c in text})
    for col in text:
        if col in df and df[col].isna().any():  # "NA", "null", ...: text is read verbatim
            df[col] = pd.read_csv(path, usecols=[col], dtype=str, keep_default_na=False)[col]
    return df


def blank_row(values: pd.Series) -> int | None:
    """The first row (counted from 1) whose value is null or blank text, or None."""
    blank = values.isna() | (values.astype(str).str.strip() == "")
    return int(blank.to_numpy().argmax()) + 1 if blank.any() else None


def read_table(path: str | os.PathLike, columns: Iterable[str] = (), nonempty: bool = False,
               ids: Iterable[str] = ID_COLUMNS, text: Iterable[str] = ()) -> pd.DataFrame:
    """Read parquet, CSV or JSON (lines, or one array); a missing file, unknown type, missing
    column or (with `nonempty`) a file without rows is one line.

    Columns in `ids` and `text` are read from CSV and JSON verbatim, as text (no type
    guessing: "007" stays "007", a 20-digit number keeps its digits); a blank id is an error."""
    path = Path(path)
    if not path.exists():
        raise BoundaryError(f"{path}: file not found")
    if path.is_dir():
        raise BoundaryError(f"{path}: is a folder, not a file")
    ids = tuple(ids)
    verbatim = ids + tuple(text)
    readers = {".parquet": pd.read_parquet, ".csv": lambda p: _read_csv(p, verbatim),
               ".jsonl": lambda p: read_json(p, text=verbatim), ".json": lambda p: read_json(p, text=verbatim)}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise BoundaryError(f"{path}: unknown file type {path.suffix!r} (use parquet, csv or jsonl)")
    try:
        df = reader(path)
    except BoundaryError:
        raise
    except Exception as err:  # corrupt or unreadable file
        detail = " ".join(str(err).split())  # one line, whatever the reader's message
        raise BoundaryError(f"{path}: cannot be read ({type(err).__name__}: {detail})") from None
    if nonempty and df.empty:
        raise BoundaryError(f"{path}: no rows")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise BoundaryError(f"{path}: missing column(s) {', '.join(missing)}")
    for col in ids:
        if col in df.columns:
            row = blank_row(df[col])
            if row is not None:
                raise BoundaryError(f"{path}: blank {col} in row {row}")
    return df
