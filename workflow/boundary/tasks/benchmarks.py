"""The public benchmarks the configs read (GSM8K, MATH500, Omni-MATH-Rule), in their layout:
`boundary get-data`.

    data/gsm8k/train.jsonl, data/gsm8k/test.jsonl   question, answer ("... #### 72")
    data/math500/test.jsonl                         problem, solution, answer, subject, level, unique_id
    data/omni_math_rule/test.jsonl                  domain, difficulty, problem, solution, answer, source

From the hub by default (`datasets.load_dataset`: openai/gsm8k, HuggingFaceH4/MATH-500, and
Omni-MATH-Rule's file in its GitHub repository at a pinned commit), or from a local copy
(`--from`: a jsonl/json/parquet file, a folder of them as the hub or this layout keeps them, or
a `save_to_disk` folder). Rows are written as the published files write them (one JSON object a
line, its fields in the layout's order, ASCII-escaped), so a faithful copy is byte for byte the
published file: each file's SHA-256 is checked against the published one, and a file that
differs (another revision, a subset, a conversion that changed a value) gets a warning line.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from boundary.core.artifacts import write_text
from boundary.core.errors import BoundaryError, warn
from boundary.core.options import ArgumentParser, description

OMNI_COMMIT = "4793415ef37d31c9cdb4e5b82dbe172f76f8cf08"  # KbsdJames/omni-math-rule


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: its splits (file name -> the hub's split), its fields in the layout's
    order (the required ones first), where the hub keeps it, and the published files' rows and
    SHA-256."""

    fields: tuple[str, ...]
    required: tuple[str, ...]
    hub: str  # a dataset repository, or a URL of a JSON-lines file
    hub_config: str | None
    rows: dict[str, int]
    sha256: dict[str, str]
    splits: dict[str, str] = field(default_factory=lambda: {"test": "test"})


BENCHMARKS = {
    "gsm8k": Benchmark(
        fields=("question", "answer"), required=("question", "answer"),
        hub="openai/gsm8k", hub_config="main", splits={"train": "train", "test": "test"},
        rows={"train": 7473, "test": 1319},
        sha256={"train": "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
                "test": "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"}),
    "math500": Benchmark(
        fields=("problem", "solution", "answer", "subject", "level", "unique_id"),
        required=("problem", "answer", "unique_id"), hub="HuggingFaceH4/MATH-500", hub_config=None,
        rows={"test": 500},
        sha256={"test": "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132"}),
    "omni_math_rule": Benchmark(
        fields=("domain", "difficulty", "problem", "solution", "answer", "source"),
        required=("problem", "answer"),
        hub=f"https://raw.githubusercontent.com/KbsdJames/omni-math-rule/{OMNI_COMMIT}/"
            "evaluation/data/omni_math_rule/test.jsonl", hub_config=None,
        rows={"test": 2821},
        sha256={"test": "d566d5b5a9865a04b507fdc4c0669cf0ff391748e13f190ecc925e78b584b172"}),
}
TABLE_SUFFIXES = (".jsonl", ".json", ".parquet")


def jsonl(rows: list[dict], fields: tuple[str, ...]) -> str:
    """Rows as the published files write them: the layout's fields in order (others dropped)."""
    return "".join(json.dumps({k: row[k] for k in fields if k in row}) + "\n" for row in rows)


def check_rows(rows: list[dict], name: str, split: str, where: str) -> None:
    """Every row has the benchmark's required fields; GSM8K's answers end in `#### <answer>`."""
    spec = BENCHMARKS[name]
    if not rows:
        raise BoundaryError(f"{where}: no rows")
    missing = [k for k in spec.required if k not in rows[0]]
    if missing:
        raise BoundaryError(f"{where}: {name} needs the field(s) {', '.join(missing)}; "
                            f"it has {', '.join(rows[0]) or 'none'}")
    for i, row in enumerate(rows, 1):
        if any(row.get(k) is None for k in spec.required):
            gone = [k for k in spec.required if row.get(k) is None]
            raise BoundaryError(f"{where}: row {i} has no {', '.join(gone)}")
        if name == "gsm8k" and "####" not in str(row["answer"]):
            raise BoundaryError(f"{where}: row {i}: a GSM8K answer ends in '#### <number>' "
                                f"(the config's answer_format: gsm8k reads it); this one does not")


def _python(value):
    """A value as JSON would hold it (numpy scalars and arrays from parquet, as Python's)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _python(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_python(v) for v in value]
    return value


def read_file(path: Path) -> list[dict]:
    """The rows of a jsonl/json/parquet file, values as JSON holds them."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as err:
            raise BoundaryError(f"{path}: not a readable parquet file ({err})") from None
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".json" and text.lstrip().startswith("["):
            return json.loads(text)
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as err:
        raise BoundaryError(f"{path}: not JSON lines ({err})") from None


def _split_files(folder: Path, split: str) -> list[Path]:
    """The files of a split in a folder: `<split>.jsonl` (this layout), or the hub's
    `<split>-00000-of-00001.parquet` shards (in any subfolder, such as a config's)."""
    exact = [folder / f"{split}{suffix}" for suffix in TABLE_SUFFIXES if (folder / f"{split}{suffix}").is_file()]
    if exact:
        return exact[:1]
    return sorted(p for p in folder.rglob(f"{split}*") if p.suffix in TABLE_SUFFIXES and p.is_file()
                  and p.name.split(".")[0].split("-")[0] == split)


def read_local(source: Path, name: str) -> dict[str, tuple[list[dict], str]]:
    """Each split's rows from a local copy, and where they came from (for messages)."""
    spec = BENCHMARKS[name]
    if not source.exists():
        raise BoundaryError(f"--from {source}: no such file or folder")
    if source.is_file():
        if len(spec.splits) > 1:
            raise BoundaryError(f"--from {source}: {name} has {len(spec.splits)} splits "
                                f"({', '.join(spec.splits)}); give a folder holding them")
        if source.suffix not in TABLE_SUFFIXES:
            raise BoundaryError(f"--from {source}: not a jsonl, json or parquet file")
        return {split: (read_file(source), str(source)) for split in spec.splits}
    if (source / "dataset_dict.json").is_file() or (source / "state.json").is_file():
        return _from_disk(source, name)
    folder = source / name if (source / name).is_dir() else source  # this layout, several benchmarks
    out = {}
    for split, hub_split in spec.splits.items():
        files = _split_files(folder, split) or (_split_files(folder, hub_split) if hub_split != split else [])
        if not files:
            raise BoundaryError(f"--from {source}: no {split} file of {name} (looked for {split}.jsonl, "
                                f"{split}.parquet or {split}-*.parquet)")
        rows = [row for f in files for row in read_file(f)]
        out[split] = (rows, ", ".join(map(str, files)))
    return out


def _from_disk(source: Path, name: str) -> dict[str, tuple[list[dict], str]]:
    """A folder `datasets.save_to_disk` wrote (a DatasetDict of the splits, or one Dataset)."""
    datasets = _datasets(f"--from {source}")
    data = datasets.load_from_disk(str(source))
    splits = BENCHMARKS[name].splits
    if isinstance(data, datasets.DatasetDict):
        absent = [s for s in splits.values() if s not in data]
        if absent:
            raise BoundaryError(f"--from {source}: no split {', '.join(absent)} (it has {', '.join(data)})")
        return {split: (data[hub].to_list(), f"{source}[{hub}]") for split, hub in splits.items()}
    if len(splits) > 1:
        raise BoundaryError(f"--from {source}: one split saved; {name} has {', '.join(splits)}")
    return {split: (data.to_list(), str(source)) for split in splits}


def _datasets(what: str):
    try:
        import datasets
    except ImportError:
        raise BoundaryError(f"{what}: needs the `datasets` package (pip install datasets)") from None
    return datasets


def read_hub(name: str) -> dict[str, tuple[list[dict], str]]:
    """Each split's rows from the hub (datasets.load_dataset)."""
    from boundary.core.hub import offline_switches, why_not_fetched

    spec = BENCHMARKS[name]
    where = spec.hub + (f" ({spec.hub_config})" if spec.hub_config else "")
    if offline_switches():  # fail at once, naming the switch, rather than after datasets' retries
        raise BoundaryError(f"{name}: {where} was not fetched: {why_not_fetched()}, or give a local "
                            f"copy with --from PATH")
    datasets = _datasets(name)
    out = {}
    for split, hub_split in spec.splits.items():
        try:
            if spec.hub.startswith("https://"):
                rows = datasets.load_dataset("json", data_files=spec.hub, split="train").to_list()
            else:
                rows = datasets.load_dataset(spec.hub, spec.hub_config, split=hub_split).to_list()
        except Exception as err:
            first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
            raise BoundaryError(f"{name}: {where} was not fetched ({first}): {why_not_fetched()}, or "
                                f"give a local copy with --from PATH") from None
        out[split] = (rows, f"{where} [{hub_split}]")
    return out


def get(name: str, out: Path, source: Path | None = None) -> list[str]:
    """Write one benchmark's splits under out/name/; one line a file (rows, where from, whether
    it is the published file)."""
    spec = BENCHMARKS[name]
    read = read_hub(name) if source is None else read_local(source, name)
    lines = []
    for split, (rows, where) in read.items():
        rows = [_python(row) for row in rows]
        check_rows(rows, name, split, where)
        text = jsonl(rows, spec.fields)
        path = out / name / f"{split}.jsonl"
        write_text(text, path)
        digest = hashlib.sha256(text.encode()).hexdigest()
        line = f"{path}: {len(rows)} rows from {where}"
        if digest == spec.sha256[split]:
            lines.append(f"{line}; the published file (sha256 {digest[:12]})")
        else:
            lines.append(line)
            warn(f"{path}: {len(rows)} rows (published: {spec.rows[split]}), sha256 {digest[:12]}, not the "
                 f"published file's {spec.sha256[split][:12]}: another revision or a changed copy")
    return lines


def make_parser() -> ArgumentParser:
    names = ", ".join(BENCHMARKS)
    parser = ArgumentParser(
        prog="boundary get-data", description=description(__doc__),
        epilog="examples:\n  boundary get-data gsm8k math500 omni_math_rule --out data\n"
               "  boundary get-data math500 --from ~/copies/math500.parquet --out data")
    parser.add_argument("names", nargs="+", metavar="NAME", help=f"benchmarks to write ({names})")
    parser.add_argument("--out", default="data", help="the data folder the configs read")
    parser.add_argument("--from", dest="source", metavar="PATH",
                        help="a local copy instead of the hub: a jsonl/json/parquet file (one "
                             "benchmark of one split), a folder of split files (the hub's or this "
                             "layout's, NAME/ subfolders included) or a save_to_disk folder")
    return parser


def main(argv=None):
    args = make_parser().parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        raise BoundaryError(f"{', '.join(unknown)}: not a benchmark get-data knows ({', '.join(BENCHMARKS)})")
    source = None if args.source is None else Path(os.path.expanduser(args.source))
    if source is not None and source.is_file() and len(args.names) > 1:
        raise BoundaryError(f"--from {source}: one file holds one benchmark; name one, or give a folder")
    for name in dict.fromkeys(args.names):
        for line in get(name, Path(args.out), source):
            print(line)
