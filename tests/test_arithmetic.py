"""The generated arithmetic task: deterministic given the seed, every answer right (worked
out again from the question text alone), splits disjoint, levels mixed evenly, and the JSONL
read by the data stage and graded by the verifier like any other data file."""

import json
import re

import pytest

from boundary.cli import main
from boundary.stages.data import build_splits
from boundary.tasks.arithmetic import Level, answer_cap, generate, modal_answer, parse_levels
from boundary.tasks.verify import Verifier, extract_answer

LEVELS = parse_levels("1:10:+-*/,2:100:+-*/,3:20:+-*/,4:100:+-*/")

# Each sentence of a story as (pattern, operation): read independently of the generator.
STEPS = [
    (r"has (\d+) \w+", lambda v, b: b),
    (r"(?:buys|finds|gives \w+) (\d+) more", lambda v, b: v + b),
    (r"(?:gives|loses|sells) (\d+) (?!more)", lambda v, b: v - b),
    (r"with (\d+) times as many|are (\d+) times as many", lambda v, b: v * b),
    (r"among (\d+) people|into (\d+) equal", lambda v, b: v / b),
]


def solve(question: str) -> float:
    value = None
    for sentence in re.split(r"(?<=[.?])\s+", question)[:-1]:
        hits = [(op, next(g for g in m.groups() if g)) for pattern, op in STEPS
                if (m := re.search(pattern, sentence))]
        assert len(hits) == 1, sentence
        op, number = hits[0]
        value = op(value, int(number))
    return value


def test_answers_are_right_and_splits_disjoint():
    splits = generate({"train": 300, "diagnostic": 100}, seed=3, levels=LEVELS)
    rows = splits["train"] + splits["diagnostic"]
    assert [len(splits["train"]), len(splits["diagnostic"])] == [300, 100]
    for row in rows:
        value = solve(row["question"])
        assert value == int(row["answer"]) and int(row["answer"]) >= 0, row
        assert row["question"].endswith("have now?")
        assert row["solution"].count("=") == row["steps"]
    assert len({r["question"] for r in rows}) == len(rows)
    assert len({r["id"] for r in rows}) == len(rows)
    # levels cycle, so every prefix mixes them evenly
    assert [r["steps"] for r in splits["train"][:8]] == [1, 2, 3, 4] * 2
    assert {r["difficulty"] for r in rows} == {lv.name for lv in LEVELS}


def test_deterministic_given_the_seed():
    one = generate({"train": 50}, seed=7, levels=LEVELS)
    assert one == generate({"train": 50}, seed=7, levels=LEVELS)
    assert one != generate({"train": 50}, seed=8, levels=LEVELS)


def _ops(rows):
    return {op for row in rows for op in re.findall(r" ([-+*/]) \d+ =", row["solution"])}


def test_operations_stay_in_range_and_in_the_level():
    rows = generate({"x": 400}, seed=0, levels=[Level(4, 10, "+-*/")])["x"]
    for row in rows:
        operands = [int(b) for b in re.findall(r"[-+*/] (\d+) =", row["solution"])]
        assert all(1 <= b <= 10 for b in operands), row
    assert _ops(rows) == {"+", "-", "*", "/"}
    easy, hard = generate({"easy": 200, "hard": 200}, seed=0, levels=[Level(2, 5, "+-"), Level(3, 10, "*/")]).values()
    assert _ops(easy + hard) == {"+", "-", "*", "/"}  # levels cycle within each split
    mixed = easy + hard
    assert _ops([r for r in mixed if r["steps"] == 2]) == {"+", "-"}
    assert _ops([r for r in mixed if r["steps"] == 3]) == {"*", "/"}
    assert all(solve(r["question"]) == int(r["answer"]) for r in mixed)
    assert {r["difficulty"] for r in mixed} == {"2-step, operands to 5, +- only", "3-step, operands to 10, */ only"}


def test_the_command_writes_jsonl_the_data_stage_reads(tmp_path):
    out = tmp_path / "arith"
    assert main(["arithmetic", "--out", str(out), "--split", "train=40", "--split",
                 "diagnostic=12", "--seed", "0", "--levels", "1:10:+-,3:50:+-*/"]) == 0
    first = (out / "train.jsonl").read_text()
    assert main(["arithmetic", "--out-dir", str(out), "--split", "train=40", "--split",
                 "diagnostic=12", "--seed", "0", "--levels", "1:10:+-,3:50:+-*/"]) == 0
    assert (out / "train.jsonl").read_text() == first  # same seed, same bytes (--out-dir: the alias)

    def spec(split):
        return {"path": str(out / f"{split}.jsonl"), "problem_field": "question",
                "answer_field": "answer", "id_field": "id", "answer_format": "plain",
                "limit": None, "source": "arithmetic", "extractor": None}

    settings = {"testbed": None, "prompt": {"template": "{problem}", "chat": False, "system": None},
                "data": {"train": spec("train"), "diagnostic": spec("diagnostic"),
                         "benchmarks": {"arith": spec("diagnostic")}}}
    splits = build_splits(settings)
    train, diagnostic = splits["train"], splits["diagnostic"]
    assert len(train) == 40 and len(diagnostic) == 12
    assert not set(train["problem"]) & set(diagnostic["problem"])
    rows = [json.loads(line) for line in first.splitlines()]
    assert train["prompt_id"].tolist() == [r["id"] for r in rows]
    assert train["answer"].tolist() == [r["answer"] for r in rows]
    # a completion in the model's own style is graded right on its last number, or its box
    gold = train["answer"].iloc[5]
    answers = [extract_answer(f"So there are {gold} left. The answer is {gold}.", "last_number"),
               extract_answer(f"So the answer is \\boxed{{{gold}}}.", "boxed"),
               extract_answer(f"{gold} - 1 = {int(gold) - 1}", "last_number")]
    assert Verifier(timeout=5, workers=1).check([gold] * 3, answers) == [True, True, False]


EASY = parse_levels("1:10:+-,1:10:+-,1:20:+-,1:10:+-*/")  # small answers, many of them 1


def test_the_answer_guard_holds_on_every_prefix_of_every_split():
    """Unguarded, one answer ('1': 3 - 2, 7 / 7) is over a tenth of an easy mix, and a policy
    that always writes it earns that much reward; at --max-answer-share 0.05 no answer holds
    more than 5% (rounded up) of any prefix of a split, and the problems stay right."""
    sizes = {"train": 400, "diagnostic": 300}
    free = generate(sizes, seed=1, levels=EASY)
    assert modal_answer(free["train"])[1] > 0.1 * 400  # the shortcut the guard removes
    guarded = generate(sizes, seed=1, levels=EASY, max_answer_share=0.05)
    assert guarded == generate(sizes, seed=1, levels=EASY, max_answer_share=0.05)  # seeded
    for rows in guarded.values():
        counts = {}
        for k, row in enumerate(rows, 1):
            counts[row["answer"]] = counts.get(row["answer"], 0) + 1
            assert max(counts.values()) <= answer_cap(0.05, k, len(rows)) < 0.05 * k + 1
        assert max(counts.values()) <= 0.05 * len(rows)  # the whole split: the share itself
        assert all(solve(r["question"]) == int(r["answer"]) for r in rows)
        assert [r["difficulty"] for r in rows[:4]] == [lv.name for lv in EASY]  # levels still cycle
    rows = guarded["train"] + guarded["diagnostic"]
    assert len({r["question"] for r in rows}) == len(rows)
    assert [answer_cap(0.05, k, 64) for k in (1, 20, 21, 40, 41, 64)] == [1, 1, 2, 2, 3, 3]
    assert answer_cap(0.05, 4, 4) == 1 and answer_cap(0.07, 100, 100) == 7  # 0.07 x 100 is 7.000000000000001


def test_the_command_reports_each_splits_modal_answer_and_warns_over_five_percent(tmp_path, capsys):
    args = ["arithmetic", "--out", str(tmp_path), "--split", "train=200", "--split", "test=40",
            "--seed", "1", "--levels", "1:10:+-,1:10:+-,1:20:+-,1:10:+-*/"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    answer, count = modal_answer(train)
    assert f"train.jsonl: 200 problems; modal answer {answer} on {count} ({count / 200:.1%})" in out
    warnings = err.strip().splitlines()
    assert warnings and all(w.startswith("warning: ") for w in warnings)
    assert f"warning: train: answer {answer} is {count / 200:.1%} of its problems" in err
    assert main([*args, "--max-answer-share", "0.05"]) == 0  # guarded: reported, no warning
    out, err = capsys.readouterr()
    assert err == "" and out.count("modal answer") == 2


@pytest.mark.parametrize("args, message", [
    (["--split", "train"], "--split: 'train' is not NAME=COUNT"),
    (["--split", "a=2", "--split", "a=3"], "--split: a split name is given twice"),
    (["--split", "a=2", "--levels", "0:10:+"], "--levels: '0:10:+' is not steps:operand_max:operations"),
    (["--split", "a=2", "--levels", "1:10"], "--levels: '1:10' is not steps:operand_max:operations"),
    (["--split", "a=2", "--levels", "1:10:+x"], "--levels: '1:10:+x' is not steps:operand_max:operations"),
    (["--split", "a=2", "--levels", "1:10:++"], "--levels: '1:10:++' is not steps:operand_max:operations"),
    (["--split", "a=20000", "--levels", "1:2:+-*/"], "--levels: level '1-step, operands to 2' gave no new problem"),
    (["--split", "a=2", "--max-answer-share", "0"], "argument --max-answer-share: '0' is not a number above 0"),
    (["--split", "a=2", "--max-answer-share", "1.5"], "argument --max-answer-share: '1.5' is not a number above 0"),
    (["--split", "a=2", "--max-answer-share", "x"], "argument --max-answer-share: 'x' is not a number above 0"),
    (["--split", "a=400", "--levels", "1:5:+-", "--max-answer-share", "0.05"],
     "--max-answer-share: level '1-step, operands to 5, +- only' gave no problem whose answer stays within 0.05"),
])
def test_bad_options_are_one_line(tmp_path, capsys, args, message):
    assert main(["arithmetic", "--out", str(tmp_path / "o"), *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("section, message", [
    ({"splits": {"a/b": 3}}, "arithmetic.splits: name 'a/b': names hold only letters, digits and _"),
    ({"splits": {"train": 3}, "levels": [[0, 10, "+"]]}, "arithmetic.levels.0.0: 0 is less than the minimum of 1"),
    ({"splits": {"train": 3}, "levels": [[1, 10, "x"]]}, "arithmetic.levels.0.2: 'x' does not match"),
    ({"splits": {}}, "arithmetic.splits: {} should be non-empty"),
    ({"splits": {"train": 3}, "max_answer_share": 0}, "arithmetic.max_answer_share: 0 is less than or equal to the minimum of 0"),
    ({"splits": {"train": 3}, "max_answer_share": 2}, "arithmetic.max_answer_share: 2 is greater than the maximum of 1"),
    ({"splits": {"train": 3}, "max_answer_share": "5%"}, "arithmetic.max_answer_share: '5%' is not of type"),
])
def test_a_bad_config_section_is_one_line(section, message):
    from conftest import ROOT

    from boundary.core.config import load_yaml, validate_config
    from boundary.core.errors import BoundaryError

    config = {**load_yaml(ROOT / "tests" / "configs" / "smollm2_arith_smoke.yaml"), "arithmetic": section}
    with pytest.raises(BoundaryError, match=re.escape(message)):
        validate_config(config)


def test_the_default_mix_draws_the_same_problems(tmp_path):
    """The default levels at seed 0 draw these files, byte for byte, as the first generator wrote
    them: splits a finished run was made from are made again alike."""
    import hashlib

    assert main(["arithmetic", "--out", str(tmp_path), "--split", "diagnostic=1024", "--split",
                 "test=64", "--split", "train=512", "--seed", "0"]) == 0
    digests = {s: hashlib.sha256((tmp_path / f"{s}.jsonl").read_bytes()).hexdigest()[:16]
               for s in ("diagnostic", "test", "train")}
    assert digests == {"diagnostic": "8cd7b0bf3d39f816", "test": "0e53b8d1b923322e", "train": "f119b94ccf00ba3d"}


def test_the_workflow_writes_the_task_and_splits_it_by_id(tmp_path):
    """tests/configs/smollm2_arith_smoke.yaml's first stages run by Snakemake (without the chat
    template, so without the model): the `arithmetic` rule writes the files the `data:` entries
    name, its log gives each split's modal answer, and each split is read by id, disjoint from
    the others."""
    import pandas as pd
    import yaml
    from conftest import ROOT
    from test_workflow import snakemake

    config = yaml.safe_load((ROOT / "tests" / "configs" / "smollm2_arith_smoke.yaml").read_text())
    config["prompt"]["chat"] = False
    (tmp_path / "arith.yaml").write_text(yaml.safe_dump(config))
    run = tmp_path / "results" / config["run"]
    splits = {"train": "train", "diagnostic": "diagnostic", "test": "bench_arithmetic"}
    snakemake(*(f"results/{config['run']}/splits/{s}.parquet" for s in splits.values()), "--cores", "1",
              "--configfile", str(tmp_path / "arith.yaml"), cwd=tmp_path)
    assert (run / "logs" / "arithmetic.log").read_text().count("modal answer") == 3
    made = {s: pd.read_json(run / "arithmetic" / f"{s}.jsonl", lines=True, dtype=False) for s in splits}
    assert {s: len(made[s]) for s in splits} == config["arithmetic"]["splits"]
    questions = [set(df["question"]) for df in made.values()]
    assert sum(map(len, questions)) == len(set.union(*questions))  # disjoint
    for name, split in splits.items():
        read = pd.read_parquet(run / "splits" / f"{split}.parquet")
        assert read["prompt_id"].tolist() == made[name]["id"].tolist()
        assert read["answer"].tolist() == made[name]["answer"].tolist()
