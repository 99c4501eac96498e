"""Arithmetic word problems with known integer answers: a seeded reasoning task whose
difficulty is set by the number of operations (steps) and the size of the operands.

A problem is a short story about one person's stock of some item: a starting amount, then
one sentence per step that adds (+), takes away (-), multiplies by a small number (*) or shares
out equally (/, a division that always comes out even), then the question "How many ... now?".
A level names its number of steps, its largest operand and the operations it draws from. The
answer is the final count, a positive integer, so the `last_number` (or `boxed`) extractor
and math-verify grade it. Each row also carries its solution as a chain of equations and its
difficulty, so a file can mix levels and be stratified by them later.

`boundary arithmetic` writes the rows as plain JSONL splits (`id`, `question`, `answer`,
`solution`, `difficulty`, `steps`, `operand_max`), which a config's `data:` section reads like
any other file. The splits of one call are drawn from one random stream with no problem text
repeated, so they are disjoint. The same seed and levels give the same files.

Small operands make some answers common (6 / 6 and 3 - 2 are both 1), and a policy that always
writes the commonest answer earns its share as reward without reasoning. `--max-answer-share`
(config `arithmetic.max_answer_share`) redraws a problem whose answer would exceed that share of
its split so far: the whole split keeps to it, and every prefix (a `limit:` too) to it rounded up
to whole rows (`answer_cap`). The command reports each split's modal answer and warns when it is
over SHORTCUT_SHARE (and appears more than once).
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from boundary.core.errors import BoundaryError, warn
from boundary.core.options import SHARE, ArgumentParser, description
from boundary.core.schema import defaults as schema_defaults

NAMES = ["Ava", "Ben", "Carla", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jamal",
         "Kenji", "Lena", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tara"]
ITEMS = ["apples", "marbles", "stickers", "books", "pencils", "stamps", "cookies", "shells",
         "coins", "cards", "beads", "eggs", "oranges", "balloons", "toy cars", "postcards"]
FRIENDS = ["a friend", "a neighbour", "a cousin", "a classmate", "a teacher"]

MULTIPLIER_MAX = 9  # "times as many": small factors, as word problems use
DIVISOR_MAX = 12
VALUE_MAX = 99_999  # a running total never grows past five digits
ATTEMPTS = 50  # draws per wanted problem before the level is declared too small to fill
# A modal answer above this share of a split is warned about: a constant-answer policy would
# earn about as much training reward as SmolLM2-135M-Instruct's base does by reasoning (5.5%).
SHORTCUT_SHARE = 0.05


@dataclass(frozen=True)
class Level:
    """One difficulty: `steps` operations, each one of `operations` ('+-*/' or a part of it),
    on operands of at most `operand_max`."""

    steps: int
    operand_max: int
    operations: str

    @property
    def name(self) -> str:
        """'2-step, operands to 10' (every operation), '1-step, operands to 5, +- only'."""
        name = f"{self.steps}-step, operands to {self.operand_max}"
        return name if set(self.operations) == set(OPERATIONS) else f"{name}, {self.operations} only"


def _add(rng, value, level, name, items):
    b = rng.randint(1, level.operand_max)
    more = f"{b} more {items if b > 1 else items[:-1]}"
    text = rng.choice([f"{name} buys {more}.", f"{name} finds {more}.",
                       f"{rng.choice(FRIENDS).capitalize()} gives {name} {more}."])
    return value + b, text, f"{value} + {b} = {value + b}"


def _subtract(rng, value, level, name, items):
    if value < 2:
        return None
    b = rng.randint(1, min(value - 1, level.operand_max))
    text = rng.choice([f"{name} gives {_count(b, items)} to {rng.choice(FRIENDS)}.",
                       f"{name} loses {_count(b, items)}.",
                       f"{name} sells {b} of the {items}."])
    return value - b, text, f"{value} - {b} = {value - b}"


def _multiply(rng, value, level, name, items):
    top = min(MULTIPLIER_MAX, level.operand_max, VALUE_MAX // value)
    if top < 2:
        return None
    b = rng.randint(2, top)
    text = rng.choice([f"Then {name} ends up with {b} times as many {items} as before.",
                       f"{name} collects more until there are {b} times as many {items} as before."])
    return value * b, text, f"{value} * {b} = {value * b}"


def _divide(rng, value, level, name, items):
    divisors = [d for d in range(2, min(DIVISOR_MAX, level.operand_max, value) + 1) if value % d == 0]
    if not divisors:
        return None
    b = rng.choice(divisors)
    text = rng.choice([f"{name} shares the {items} equally among {b} people, {name} included, "
                       f"and keeps one share.",
                       f"{name} splits the {items} into {b} equal piles and keeps one pile."])
    return value // b, text, f"{value} / {b} = {value // b}"


def _count(n: int, items: str) -> str:
    """'1 apple', '3 apples' (every item name is a plural in -s)."""
    return f"{n} {items[:-1] if n == 1 else items}"


OPERATIONS = {"+": _add, "-": _subtract, "*": _multiply, "/": _divide}


def make_problem(rng: random.Random, level: Level) -> dict | None:
    """One problem at `level`: question, integer answer (as text) and the solution's equations;
    None where no operation of the level applies to a running total (e.g. '/' on a prime)."""
    name, items = rng.choice(NAMES), rng.choice(ITEMS)
    value = rng.randint(2, level.operand_max)
    sentences, equations = [f"{name} has {value} {items}."], []
    ops = [OPERATIONS[s] for s in level.operations]
    for _ in range(level.steps):
        for op in rng.sample(ops, len(ops)):  # the first that applies to this value
            step = op(rng, value, level, name, items)
            if step is not None:
                break
        else:
            return None
        value, sentence, equation = step
        sentences.append(sentence)
        equations.append(equation)
    sentences.append(f"How many {items} does {name} have now?")
    return {"question": " ".join(sentences), "answer": str(value), "solution": "; ".join(equations),
            "difficulty": level.name, "steps": level.steps, "operand_max": level.operand_max}


def generate(sizes: dict[str, int], seed: int, levels: list[Level],
             max_answer_share: float | None = None) -> dict[str, list[dict]]:
    """{split: rows} from one stream seeded by `seed`; row i of the stream has level
    i mod len(levels), so every prefix of a split mixes the levels evenly. No question text
    appears twice across all splits. With `max_answer_share`, a draw is redrawn (same level)
    when its answer would hold more than answer_cap(share, k, n) of its n-row split's first k
    rows."""
    if not levels:
        raise BoundaryError("--levels: at least one level")
    rng, seen, out, index = random.Random(seed), set(), {}, 0
    for split, n in sizes.items():
        rows, answers = [], Counter()
        while len(rows) < n:
            level = levels[index % len(levels)]
            cap = None if max_answer_share is None else answer_cap(max_answer_share, len(rows) + 1, n)
            capped = False  # a draw was new but its answer was over the cap
            for _ in range(ATTEMPTS):
                row = make_problem(rng, level)
                if row is None or row["question"] in seen:
                    continue
                if cap is None or answers[row["answer"]] < cap:
                    break
                capped = True
            else:
                if capped:
                    raise BoundaryError(f"--max-answer-share: level {level.name!r} gave no problem whose answer "
                                        f"stays within {max_answer_share} of split {split!r} in {ATTEMPTS} "
                                        f"draws (too few distinct answers for this share?)")
                raise BoundaryError(f"--levels: level {level.name!r} gave no new problem in {ATTEMPTS} "
                                    f"draws (too few distinct problems for {sum(sizes.values())} rows?)")
            seen.add(row["question"])
            answers[row["answer"]] += 1
            rows.append({"id": f"arith-s{seed}-{index:06d}", **row})
            index += 1
        out[split] = rows
    return out


def answer_cap(share: float, rows: int, total: int) -> int:
    """The most of the first `rows` rows of a `total`-row split that one answer may hold at
    `share`: share x rows rounded up, so any answer may appear once and a split's first rows
    need not all differ (rounded down, the first 39 rows at 0.05 would need 39 distinct answers,
    more than an easy level has), but never above share x total rounded down (at least 1), so a
    whole split keeps to the share itself."""
    so_far, whole = round(share * rows, 9), round(share * total, 9)  # 0.07 x 100 is 7.000000000000001
    return min(math.ceil(so_far), max(1, math.floor(whole)))


def modal_answer(rows: list[dict]) -> tuple[str, int]:
    """The commonest answer of `rows` and its count (the first drawn wins a tie)."""
    return Counter(r["answer"] for r in rows).most_common(1)[0]


def parse_levels(text: str) -> list[Level]:
    """'1:10:+-,2:20:+-*/' -> [Level(1, 10, '+-'), Level(2, 20, '+-*/')]."""
    levels = []
    for part in text.split(","):
        fields = part.strip().split(":")
        try:
            level = Level(int(fields[0]), int(fields[1]), fields[2]) if len(fields) == 3 else None
        except ValueError:
            level = None
        if (level is None or level.steps < 1 or level.operand_max < 2 or not level.operations
                or set(level.operations) - set(OPERATIONS) or len(set(level.operations)) < len(level.operations)):
            raise BoundaryError(f"--levels: {part.strip()!r} is not steps:operand_max:operations "
                                f"(steps >= 1, operand_max >= 2, operations: distinct of +-*/)")
        levels.append(level)
    return levels


def levels_text(levels: list) -> str:
    """A config's levels ([steps, operand_max, operations] triples) as --levels takes them."""
    return ",".join(":".join(str(x) for x in level) for level in levels)


def parse_split(text: str) -> tuple[str, int]:
    name, _, n = text.partition("=")
    if not name or not n.strip().isdigit() or int(n) < 1 or "/" in name:
        raise BoundaryError(f"--split: {text!r} is not NAME=COUNT (COUNT >= 1)")
    return name, int(n)


def make_parser() -> ArgumentParser:
    defaults = schema_defaults("arithmetic")  # the config section's, written once
    parser = ArgumentParser(prog="boundary arithmetic", description=description(__doc__),
                            epilog="example:\n  boundary arithmetic --out data/arith --split train=2000 "
                                   "--split test=500 --levels 2:20:+-,4:50:+-*/")
    parser.add_argument("--out", "--out-dir", dest="out", required=True,
                        help="folder for NAME.jsonl, one per --split (--out-dir: the old spelling)")
    parser.add_argument("--split", action="append", required=True, metavar="NAME=COUNT",
                        help="a split and its number of problems (repeat: disjoint splits)")
    parser.add_argument("--seed", type=int, default=defaults["seed"], help="the random stream's seed")
    parser.add_argument("--levels", default=levels_text(defaults["levels"]),
                        help="difficulties mixed evenly, as steps:operand_max:operations "
                             "(default: %(default)s)")
    share = defaults["max_answer_share"]
    parser.add_argument("--max-answer-share", type=SHARE, default=share,
                        help="redraw a problem whose answer would exceed this share of its split "
                             f"so far (default: {'no limit' if share is None else share})")
    return parser


def main(argv=None):
    from boundary.core.artifacts import write_text  # pandas: not at import, the Snakefile reads levels_text

    args = make_parser().parse_args(argv)
    sizes = dict(parse_split(s) for s in args.split)
    if len(sizes) < len(args.split):
        raise BoundaryError("--split: a split name is given twice")
    splits = generate(sizes, args.seed, parse_levels(args.levels), args.max_answer_share)
    for split, rows in splits.items():
        path = Path(args.out) / f"{split}.jsonl"
        write_text("".join(json.dumps(r) + "\n" for r in rows), path)
        answer, count = modal_answer(rows)
        print(f"{path}: {len(rows)} problems; modal answer {answer} on {count} ({count / len(rows):.1%})",
              flush=True)  # before its warning, which goes to stderr
        if count > answer_cap(SHORTCUT_SHARE, len(rows), len(rows)):
            warn(f"{split}: answer {answer} is {count / len(rows):.1%} of its problems, so a policy that "
                 f"always answers {answer} earns that reward without reasoning "
                 f"(arithmetic.max_answer_share, --max-answer-share, caps it)")
