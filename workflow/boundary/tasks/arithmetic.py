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
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from boundary.core.config import schema_defaults
from boundary.core.errors import BoundaryError
from boundary.core.options import ArgumentParser

NAMES = ["Ava", "Ben", "Carla", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jamal",
         "Kenji", "Lena", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tara"]
ITEMS = ["apples", "marbles", "stickers", "books", "pencils", "stamps", "cookies", "shells",
         "coins", "cards", "beads", "eggs", "oranges", "balloons", "toy cars", "postcards"]
FRIENDS = ["a friend", "a neighbour", "a cousin", "a classmate", "a teacher"]

MULTIPLIER_MAX = 9  # "times as many": small factors, as word problems use
DIVISOR_MAX = 12
VALUE_MAX = 99_999  # a running total never grows past five digits
ATTEMPTS = 50  # draws per wanted problem before the level is declared too small to fill


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


def generate(sizes: dict[str, int], seed: int, levels: list[Level]) -> dict[str, list[dict]]:
    """{split: rows} from one stream seeded by `seed`; row i of the stream has level
    i mod len(levels), so every prefix of a split mixes the levels evenly. No question text
    appears twice across all splits."""
    if not levels:
        raise BoundaryError("--levels: at least one level")
    rng, seen, out, index = random.Random(seed), set(), {}, 0
    for split, n in sizes.items():
        rows = []
        while len(rows) < n:
            level = levels[index % len(levels)]
            for _ in range(ATTEMPTS):
                row = make_problem(rng, level)
                if row is not None and row["question"] not in seen:
                    break
            else:
                raise BoundaryError(f"--levels: level {level.name!r} gave no new problem in {ATTEMPTS} "
                                    f"draws (too few distinct problems for {sum(sizes.values())} rows?)")
            seen.add(row["question"])
            rows.append({"id": f"arith-s{seed}-{index:06d}", **row})
            index += 1
        out[split] = rows
    return out


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


def main(argv=None):
    from boundary.core.artifacts import write_text  # pandas: not at import, the Snakefile reads levels_text

    defaults = schema_defaults("arithmetic")  # the config section's, written once
    parser = ArgumentParser(prog="boundary arithmetic", description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", required=True, help="folder for NAME.jsonl, one per --split")
    parser.add_argument("--split", action="append", required=True, metavar="NAME=COUNT",
                        help="a split and its number of problems (repeat: disjoint splits)")
    parser.add_argument("--seed", type=int, default=defaults["seed"])
    parser.add_argument("--levels", default=levels_text(defaults["levels"]),
                        help="difficulties mixed evenly, as steps:operand_max:operations "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)
    sizes = dict(parse_split(s) for s in args.split)
    if len(sizes) < len(args.split):
        raise BoundaryError("--split: a split name is given twice")
    for split, rows in generate(sizes, args.seed, parse_levels(args.levels)).items():
        path = Path(args.out_dir) / f"{split}.jsonl"
        write_text("".join(json.dumps(r) + "\n" for r in rows), path)
        print(f"{path}: {len(rows)} problems")
