"""Write a pipeline run's evaluation samples in the formats other tools write, for the worked
example in docs/diagnostics.md (each as that tool lays it out; see boundary/readers/*).

    python docs/examples/export_formats.py results/testbed OUT_DIR [--split diagnostic]

For every eval/{split}/{method}/seed{seed}/samples.parquet it writes
    OUT_DIR/samples/{method}_{seed}.jsonl        plain samples: prompt_id, completion, correct
    OUT_DIR/verl/{method}_{seed}/500.jsonl       verl validation dump: input, output, gts, score, step, reward, acc, pred
    OUT_DIR/lighteval/{method}_{seed}.parquet    lighteval details: doc, metric, model_response
    OUT_DIR/openrlhf/{method}_{seed}.jsonl       OpenRLHF batch inference: input, output, reward
and OUT_DIR/gold.jsonl (prompt_id, problem, answer) from splits/{split}.parquet. The prompt
texts carry a chat template around the problem, as the tools store them, so only the gold
file can key them back to the split's prompt_ids.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

CHAT = "system\nYou are a helpful assistant.\nuser\n{problem}\nassistant\n"


def export(results: Path, out: Path, split: str = "diagnostic") -> list[Path]:
    problems = pd.read_parquet(results / "splits" / f"{split}.parquet")
    problems["prompt_id"] = problems["prompt_id"].astype(str)
    text = dict(zip(problems["prompt_id"], problems["problem"].astype(str)))
    gold = dict(zip(problems["prompt_id"], problems["answer"].astype(str)))
    out.mkdir(parents=True, exist_ok=True)
    problems[["prompt_id", "problem", "answer"]].to_json(out / "gold.jsonl", orient="records", lines=True)
    written = []
    for path in sorted((results / "eval" / split).glob("*/seed*/samples.parquet")):
        method, seed = path.parent.parent.name, int(path.parent.name.removeprefix("seed"))
        s = pd.read_parquet(path)
        s["prompt_id"] = s["prompt_id"].astype(str)
        s = s.sort_values(["prompt_id", "sample_idx"], kind="stable")
        name = f"{method}_{seed}"
        for folder in ("samples", "verl", "lighteval", "openrlhf"):
            (out / folder).mkdir(exist_ok=True)
        s[["prompt_id", "completion", "correct"]].to_json(out / "samples" / f"{name}.jsonl", orient="records", lines=True)
        dump = out / "verl" / name / "500.jsonl"
        dump.parent.mkdir(exist_ok=True)
        with open(dump, "w") as f:
            for r in s.itertuples(index=False):
                score = 1.0 if r.correct else 0.0
                f.write(json.dumps({"input": CHAT.format(problem=text[r.prompt_id]), "output": r.completion,
                                    "gts": gold[r.prompt_id], "score": score, "step": 500, "reward": score,
                                    "acc": bool(r.correct), "pred": r.answer}, ensure_ascii=False) + "\n")
        docs = []
        for pid, g in s.groupby("prompt_id", sort=True):
            query = f"Solve the following problem.\n\n{text[pid]}"
            docs.append({"doc": {"query": query, "choices": [f"ANSWER: {gold[pid]}"], "gold_index": 0, "id": "",
                                 "task_name": f"custom|testbed_{split}|0", "num_samples": len(g)},
                         "metric": {f"pass@k:k=1&n={len(g)}": float(g["correct"].mean())},
                         "model_response": {"input": query, "text": g["completion"].tolist()}})
        pd.DataFrame(docs).to_parquet(out / "lighteval" / f"{name}.parquet")
        pd.DataFrame({"input": [CHAT.format(problem=text[p]) for p in s["prompt_id"]], "output": s["completion"],
                      "reward": s["correct"].astype(float)}).to_json(out / "openrlhf" / f"{name}.jsonl",
                                                                      orient="records", lines=True, force_ascii=False)
        written.append(path)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--split", default="diagnostic")
    args = ap.parse_args()
    for path in export(args.results, args.out, args.split):
        print(f"exported {path}")


if __name__ == "__main__":
    main()
