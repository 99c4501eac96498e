"""The pre-registered task candidates of the 1.5B study (lab/studies/2026-11-28-qwen15b-
preregistration.md, section 1) as train/diagnostic JSONL files, and each candidate's
near-copies (tasks/near_copy.py): every diagnostic prompt with a near-copy among its train
prompts. Reads GSM8K, MATH500 and Omni-MATH-Rule from DATA (default data/); writes
OUT/{candidate}_{train,diagnostic}.jsonl (fields id, problem, answer, and MATH500's level and
subject, the study's skill label; `id`
is the source file's row), OUT/{candidate}_near_copies.csv and OUT/{candidate}_held_out.jsonl:
the diagnostic split less its near-copies, the split the study diagnoses once the candidate is
chosen (lab/studies/2026-11-28-qwen15b-preregistration/qwen15b.yaml). A `data:` entry reads them with problem_field problem,
answer_field answer, id_field id.

--subsample adds the selection's subsamples (the page's Amendment 2), beside them:
OUT/{gsm8k,math500,omni_d5}_sel_{train,diagnostic}.jsonl. Each split's rows in file order,
its near-copy diagnostic prompts dropped first, go through `random.Random(41).sample` (a fresh
generator a split); the sampled rows are written in file order. GSM8K and Omni-MATH-Rule: 256
train and 128 diagnostic prompts; MATH500: all 250 train (even-index) rows and 128 diagnostic
(odd-index) ones. MATH500 level >= 3 is read off the MATH500 subsample by its rows' `level`
(lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select_*.yaml measure them; lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select.py applies the rule).

--stand-in DIR writes stand-ins of the three data sets there instead (their files and fields;
digit-sum problems among random words, a few diagnostic ones near-copies of train ones), large
enough for every subsample: the selection's CPU dry run (lab/studies/2026-11-28-qwen15b-task-selection/select_task_on_gpus.sh dry)
and tests read them as DATA.
    python lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_candidates.py [--data data] [--out results/qwen15b/candidates] [--subsample]
    python lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_candidates.py --stand-in DIR
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from pathlib import Path

from boundary.tasks.near_copy import near_copies

SEED = 41
# candidate: (train prompts, diagnostic prompts) of its subsample; None: every row
SUBSAMPLE = {"gsm8k": (256, 128), "math500": (None, 128), "omni_d5": (256, 128)}


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def candidates(data: Path) -> dict[str, tuple[list[dict], list[dict]]]:
    """{name: (train, diagnostic)}, each row {id, problem, answer} (+ level, and subject where the
    MATH500 file has it), by the page's table."""
    def pick(name, items, problem, answer, math=False):
        return [{"id": f"{name}-{i:05d}", "problem": r[problem], "answer": answer(r),
                 **({"level": int(r["level"])} if math else {}),
                 **({"subject": r["subject"]} if math and "subject" in r else {})} for i, r in items]

    gsm = lambda r: r["answer"].split("####")[-1].strip().replace(",", "")
    plain = lambda r: r["answer"]
    math = list(enumerate(rows(data / "math500" / "test.jsonl")))
    hard = [(i, r) for i, r in math if int(r["level"]) >= 3]
    omni = [(i, r) for i, r in enumerate(rows(data / "omni_math_rule" / "test.jsonl")) if float(r["difficulty"]) <= 5]
    return {
        "gsm8k": (pick("gsm8k_train", list(enumerate(rows(data / "gsm8k" / "train.jsonl")))[:2048], "question", gsm),
                  pick("gsm8k_test", list(enumerate(rows(data / "gsm8k" / "test.jsonl")))[:500], "question", gsm)),
        "math500": (pick("math500", [x for x in math if x[0] % 2 == 0], "problem", plain, math=True),
                    pick("math500", [x for x in math if x[0] % 2 == 1], "problem", plain, math=True)),
        "math500_l3": (pick("math500", [x for x in hard if x[0] % 2 == 0], "problem", plain, math=True),
                       pick("math500", [x for x in hard if x[0] % 2 == 1], "problem", plain, math=True)),
        "omni_d5": (pick("omni", [x for x in omni if x[0] % 2 == 0][:2048], "problem", plain),
                    pick("omni", [x for x in omni if x[0] % 2 == 1][:500], "problem", plain)),
    }


def draw(items: list[dict], k: int | None, what: str) -> list[dict]:
    """k of the rows by `random.Random(SEED).sample`, in file order; all of them for k None."""
    if k is None:
        return list(items)
    if k > len(items):
        raise SystemExit(f"qwen15b_candidates: {what}: {len(items)} rows, fewer than the {k} the subsample draws")
    chosen = {r["id"] for r in random.Random(SEED).sample(items, k)}
    return [r for r in items if r["id"] in chosen]


# The fields of the selection's files as they were measured: `subject` came later (the study's
# skills table), and a changed file would make Snakemake redo the selection's runs.
SELECTION_FIELDS = ("id", "problem", "answer", "level")


def subsample(train: list[dict], diagnostic: list[dict], near: set[str], sizes, name: str):
    """The selection's (train, diagnostic) subsample: near-copy diagnostic prompts dropped first."""
    kept = [r for r in diagnostic if r["id"] not in near]

    def measured(items: list[dict]) -> list[dict]:
        return [{k: r[k] for k in SELECTION_FIELDS if k in r} for r in items]

    return measured(draw(train, sizes[0], f"{name} train")), measured(draw(kept, sizes[1], f"{name} diagnostic"))


def write_jsonl(path: Path, items: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in items))


def stand_in(folder: Path, near: int = 3) -> None:
    """Stand-in GSM8K, MATH500 and Omni-MATH-Rule files (see the module docstring): every problem
    its own words and numbers, so near-copies are only the `near` planted in each diagnostic
    split (its first rows repeat train rows' words with other numbers)."""
    rng = random.Random(0)
    words = [f"w{chr(97 + i)}{chr(97 + j)}" for i in range(26) for j in range(26)]

    def problems(count: int) -> list[tuple[str, str]]:
        out = []
        for _ in range(count):
            a, b = rng.randrange(10, 10_000), rng.randrange(10, 10_000)
            out.append((" ".join(rng.sample(words, 8)) + f" {a}+{b}=", str(a + b)))
        return out

    def planted(held: list, train: list) -> list:
        return [(t.rsplit(" ", 1)[0] + " 1+2=", "3") for t, _ in train[:near]] + held[near:]

    gsm_train, gsm_test = problems(300), problems(150)
    math, omni = problems(300), problems(1000)
    math[1::2] = planted(math[1::2], math[0::2])
    difficulty = [float(1 + i // 2 % 8) for i in range(len(omni))]  # 1..8: a quarter above 5
    easy = [i for i, d in enumerate(difficulty) if d <= 5]
    odd, even = [omni[i] for i in easy[1::2]], [omni[i] for i in easy[0::2]]
    for i, row in zip(easy[1::2], planted(odd, even)):
        omni[i] = row
    files = {
        "gsm8k/train.jsonl": [{"question": q, "answer": f"So {a}.\n#### {a}"} for q, a in gsm_train],
        "gsm8k/test.jsonl": [{"question": q, "answer": f"So {a}.\n#### {a}"}
                             for q, a in planted(gsm_test, gsm_train)],
        "math500/test.jsonl": [{"problem": q, "answer": a, "level": 1 + i % 5, "subject": ("Algebra", "Geometry")[i // 3 % 2],
                                "unique_id": f"test/{i}.json"} for i, (q, a) in enumerate(math)],
        "omni_math_rule/test.jsonl": [{"problem": q, "answer": a, "difficulty": d}
                                      for (q, a), d in zip(omni, difficulty)],
    }
    for name, items in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(folder / name, items)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data")
    ap.add_argument("--out", default="results/qwen15b/candidates")
    ap.add_argument("--subsample", action="store_true", help="also write the selection's subsamples (Amendment 2)")
    ap.add_argument("--stand-in", metavar="DIR", help="write stand-in data sets to DIR instead (dry runs, tests)")
    args = ap.parse_args(argv)
    if args.stand_in:
        stand_in(Path(args.stand_in))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, (train, diagnostic) in candidates(Path(args.data)).items():
        for split, items in (("train", train), ("diagnostic", diagnostic)):
            write_jsonl(out / f"{name}_{split}.jsonl", items)
        found = near_copies([(r["problem"], r["answer"]) for r in diagnostic], [(r["problem"], r["answer"]) for r in train])
        with open(out / f"{name}_near_copies.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["diagnostic_id", "train_id", "why"])
            w.writerows((diagnostic[i]["id"], train[j]["id"], why) for i, j, why in found)
        near = {diagnostic[i]["id"] for i, _, _ in found}
        write_jsonl(out / f"{name}_held_out.jsonl", [r for r in diagnostic if r["id"] not in near])
        line = f"{name}: train {len(train)}, diagnostic {len(diagnostic)}, near-copies {len(found)}"
        if args.subsample and name in SUBSAMPLE:
            sel = subsample(train, diagnostic, near, SUBSAMPLE[name], name)
            for split, items in zip(("train", "diagnostic"), sel):
                write_jsonl(out / f"{name}_sel_{split}.jsonl", items)
            line += f"; subsample (seed {SEED}): train {len(sel[0])}, diagnostic {len(sel[1])}"
        print(line)


if __name__ == "__main__":
    main()
