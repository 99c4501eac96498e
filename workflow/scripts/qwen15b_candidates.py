"""The pre-registered task candidates of the 1.5B study (docs/results/2026-11-28-qwen15b-
preregistration.md, section 1) as train/diagnostic JSONL files, and each candidate's
near-copies (tasks/near_copy.py): every diagnostic prompt with a near-copy among its train
prompts. Reads GSM8K, MATH500 and Omni-MATH-Rule from DATA (default data/); writes
OUT/{candidate}_{train,diagnostic}.jsonl (fields id, problem, answer; `id` is the source file's
row) and OUT/{candidate}_near_copies.csv. A `data:` entry reads them with problem_field problem,
answer_field answer, id_field id.
    python workflow/scripts/qwen15b_candidates.py [--data data] [--out results/qwen15b/candidates]
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from boundary.tasks.near_copy import near_copies


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def candidates(data: Path) -> dict[str, tuple[list[dict], list[dict]]]:
    """{name: (train, diagnostic)}, each row {id, problem, answer}, by the page's table."""
    def pick(name, items, problem, answer):
        return [{"id": f"{name}-{i:05d}", "problem": r[problem], "answer": answer(r)} for i, r in items]

    gsm = lambda r: r["answer"].split("####")[-1].strip().replace(",", "")
    math = list(enumerate(rows(data / "math500" / "test.jsonl")))
    hard = [(i, r) for i, r in math if int(r["level"]) >= 3]
    omni = [(i, r) for i, r in enumerate(rows(data / "omni_math_rule" / "test.jsonl")) if float(r["difficulty"]) <= 5]
    return {
        "gsm8k": (pick("gsm8k_train", list(enumerate(rows(data / "gsm8k" / "train.jsonl")))[:2048], "question", gsm),
                  pick("gsm8k_test", list(enumerate(rows(data / "gsm8k" / "test.jsonl")))[:500], "question", gsm)),
        "math500": (pick("math500", [x for x in math if x[0] % 2 == 0], "problem", lambda r: r["answer"]),
                    pick("math500", [x for x in math if x[0] % 2 == 1], "problem", lambda r: r["answer"])),
        "math500_l3": (pick("math500", [x for x in hard if x[0] % 2 == 0], "problem", lambda r: r["answer"]),
                       pick("math500", [x for x in hard if x[0] % 2 == 1], "problem", lambda r: r["answer"])),
        "omni_d5": (pick("omni", [x for x in omni if x[0] % 2 == 0][:2048], "problem", lambda r: r["answer"]),
                    pick("omni", [x for x in omni if x[0] % 2 == 1][:500], "problem", lambda r: r["answer"])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data")
    ap.add_argument("--out", default="results/qwen15b/candidates")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, (train, diagnostic) in candidates(Path(args.data)).items():
        for split, items in (("train", train), ("diagnostic", diagnostic)):
            (out / f"{name}_{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
        found = near_copies([(r["problem"], r["answer"]) for r in diagnostic], [(r["problem"], r["answer"]) for r in train])
        with open(out / f"{name}_near_copies.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["diagnostic_id", "train_id", "why"])
            w.writerows((diagnostic[i]["id"], train[j]["id"], why) for i, j, why in found)
        print(f"{name}: train {len(train)}, diagnostic {len(diagnostic)}, near-copies {len(found)}")


if __name__ == "__main__":
    main()
