"""Splits: train, diagnostic and benchmark prompts as parquet (prompt_id, problem, prompt,
answer, source; a dataset's cluster_field adds cluster, its skill_field skill; the synthetic
testbed adds cell, key, key_rank and the true w_star).

Real data comes from jsonl/json/parquet files named in the config, with field names mapped
there; `prompt` is the problem rendered through the config's template (and the tokenizer's
chat template when `prompt.chat` is on), so every later stage feeds the model the same text.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from boundary.core.artifacts import read_table, write_table
from boundary.core.errors import BoundaryError
from boundary.core.options import ArgumentParser, description
from boundary.readers.problems import field_texts

SPLIT_COLUMNS = ["prompt_id", "problem", "prompt", "answer", "source"]


def gsm8k_gold(answer: str) -> str:
    """GSM8K solutions end in '#### <number>'; the gold is that number without commas."""
    return answer.split("####")[-1].strip().replace(",", "")


def load_dataset_file(spec: dict, name: str) -> pd.DataFrame:
    """One split from a local file, mapped to prompt_id, problem, answer, source. Problems,
    answers and ids are read as written (`field_texts`); a value that is not text is one line."""
    path = Path(spec["path"])
    id_field, cluster_field, skill_field = spec.get("id_field"), spec.get("cluster_field"), spec.get("skill_field")
    fields = [spec["problem_field"], spec["answer_field"]]
    keys = list(dict.fromkeys(f for f in (id_field, cluster_field, skill_field) if f))
    df = read_table(path, fields + keys, nonempty=True, ids=keys, text=fields)
    if spec.get("limit"):
        df = df.head(spec["limit"])
    problems = field_texts(df[spec["problem_field"]], spec["problem_field"], path)
    answers = field_texts(df[spec["answer_field"]], spec["answer_field"], path)
    if spec.get("answer_format") == "gsm8k":
        for row, answer in enumerate(answers, 1):
            if "####" not in answer:
                raise BoundaryError(f"{path}: row {row}: answer_format gsm8k, but field "
                                    f"{spec['answer_field']!r} has no '####'")
            if not gsm8k_gold(answer):
                raise BoundaryError(f"{path}: row {row}: answer_format gsm8k, but field "
                                    f"{spec['answer_field']!r} has nothing after '####'")
        answers = [gsm8k_gold(a) for a in answers]
    ids = (df[id_field].astype(str) if id_field
           else pd.Series([f"{name}-{i:05d}" for i in range(len(df))]))
    if ids.duplicated().any():
        raise BoundaryError(f"{path}: duplicate prompt id {ids[ids.duplicated()].iloc[0]!r} "
                            f"in field {id_field!r}")
    out = pd.DataFrame({"prompt_id": ids.values, "problem": problems, "answer": answers,
                        "source": spec.get("source") or name})
    if cluster_field:
        out["cluster"] = df[cluster_field].astype(str).to_numpy()
    if skill_field:
        out["skill"] = df[skill_field].astype(str).to_numpy()
    return out


def render_prompts(problems: pd.Series, prompt: dict, model: str | None) -> list[str]:
    """The text fed to the model: the template, then (prompt.chat) the model's chat template
    with an optional system message and the generation prompt."""
    template = prompt["template"]
    if "{problem}" not in template:
        raise BoundaryError("config: prompt.template: must contain {problem}")
    texts = [template.replace("{problem}", p) for p in problems]
    if not prompt.get("chat"):
        return texts
    if not model:
        raise BoundaryError("--model: prompt.chat needs the base model folder (its chat template)")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    if not getattr(tokenizer, "chat_template", None):
        raise BoundaryError(f"{model}: the tokenizer has no chat template (set prompt.chat: false)")
    system = [{"role": "system", "content": prompt["system"]}] if prompt.get("system") else []
    return [tokenizer.apply_chat_template(system + [{"role": "user", "content": t}], tokenize=False,
                                          add_generation_prompt=True) for t in texts]


def build_splits(settings: dict, model: str | None = None) -> dict[str, pd.DataFrame]:
    """{'train': df, 'diagnostic': df, 'bench_<name>': df, ...} from testbed or data files."""
    if settings.get("testbed"):
        from boundary.tasks.testbed import make_prompts, task_from_settings

        sizes = settings["testbed"]["splits"]
        made = make_prompts(task_from_settings(settings["testbed"]), sizes)
        splits = {("bench_" + k if k not in ("train", "diagnostic") else k): v
                  for k, v in made.items()}
    else:
        data = settings["data"]  # the pipeline passes one split's dataset per job
        splits = {name: load_dataset_file(data[name], name) for name in ("train", "diagnostic") if name in data}
        for name, spec in data.get("benchmarks", {}).items():
            splits[f"bench_{name}"] = load_dataset_file(spec, name)
    for df in splits.values():
        df.insert(2, "prompt", render_prompts(df["problem"], settings["prompt"], model))
    return splits


def make_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="boundary data", description=description(__doc__))
    parser.add_argument("--settings", required=True, help="JSON string or file: the stage's settings")
    parser.add_argument("--out", "--out-dir", dest="out", required=True,
                        help="splits/ folder (--out-dir: the old spelling)")
    parser.add_argument("--model", help="base model folder (its chat template, with prompt.chat)")
    return parser


def main(argv=None):
    from boundary.core import settings as stage_settings

    args = make_parser().parse_args(argv)
    splits = build_splits(stage_settings.load("data", args.settings), args.model)
    for name, df in splits.items():
        write_table(df, Path(args.out) / f"{name}.parquet")
        print(f"{name}: {len(df)} prompts")
