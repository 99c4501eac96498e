"""Pairing the inputs of one diagnosis prompt by prompt: by the problem itself wherever the ids
cannot be trusted to name the same problem in every file.

Each input is keyed by the tool's own prompt ids ("prompt_id"), by the gold file's ids
("gold"), or by its prompt text ("text": lighteval's and verl's ids are row numbers, verl's
dumps and OpenRLHF's files have none). When no input is keyed by text, ids pair them, and
where two inputs both hold a text under one id the texts must ask the same problem, else the
input is refused. Otherwise every input's prompts are matched to the base's
by problem text (`problems.ProblemIndex`, both ways: the base's problem inside the input's
prompt, or the input's inside the base's, templates stripped by `problems.core`), and take
the base's ids; a prompt that matches none, or two prompts that match one, is refused.
"""

from __future__ import annotations

from collections import Counter

from boundary.core.errors import BoundaryError
from boundary.readers.problems import ProblemIndex, core, normalise


def _check_ids(base, run, name: str, base_name: str) -> None:
    """Under one id, two files' texts must ask the same problem (equal, one inside the other,
    or one's problem, its file's template stripped, inside the other's prompt)."""
    shared = [p for p in run.problems if p in base.problems]
    if not shared:
        return
    cores = [dict(zip(d.problems, core(list(d.problems.values())))) for d in (base, run)]
    for pid in shared:
        a, b = normalise(base.problems[pid]), normalise(run.problems[pid])
        if a == b or a in b or b in a or cores[0][pid] in b or cores[1][pid] in a:
            continue
        raise BoundaryError(f"{name}: prompt_id {pid} asks {b[:50]!r}, but {base_name} asks {a[:50]!r} under "
                            f"that id; the ids number different problems (give --gold FILE with prompt_id and "
                            f"problem, or drop the id column)")


def _to_base(base, run, name: str, base_name: str) -> dict:
    """run prompt_id -> base prompt_id, by problem text."""
    if not run.problems or len(run.problems) < len(run.counts):
        raise BoundaryError(f"{name}: keyed by prompt_id only (no prompt text), while {base_name} must be paired "
                            f"by problem text; give --gold FILE (prompt_id, problem, answer) to key both")
    forward = ProblemIndex(base.problems)  # the base's problem inside the run's prompt
    found = {pid: forward.match(text) for pid, text in run.problems.items()}
    if None in found.values():  # the run's problem inside the base's prompt
        backward, back = ProblemIndex(run.problems), {}
        for bid, text in base.problems.items():
            back.setdefault(backward.match(text), bid)
        found = {pid: b if b is not None else back.get(pid) for pid, b in found.items()}
    lost = [p for p, b in found.items() if b is None]
    if lost:
        raise BoundaryError(f"{name}: {len(lost)} prompt(s) match no problem of {base_name} "
                            f"(e.g. {str(run.problems[lost[0]])[:60]!r}); are they the same benchmark?")
    twice = [b for b, times in Counter(found.values()).items() if times > 1]
    if twice:
        raise BoundaryError(f"{name}: two prompts match one problem of {base_name} "
                            f"({str(base.problems[twice[0]])[:60]!r}); the texts disagree, pairing them would guess")
    return found


def pair(inputs: list, names: list) -> list:
    """The inputs (readers.RunData; the first is the base) keyed alike, prompt by prompt."""
    base, base_name = inputs[0], names[0]
    kinds = [d.keyed_by for d in inputs]
    if "text" not in kinds:  # the tools' own ids or the gold file's: ids pair, texts must agree
        for run, name in zip(inputs[1:], names[1:]):
            _check_ids(base, run, name, base_name)
        return inputs
    if not base.problems or len(base.problems) < len(base.counts):
        raise BoundaryError(f"{base_name}: keyed by prompt_id only (no prompt text), while {names[kinds.index('text')]} "
                            f"is keyed by its prompt text; give --gold FILE (prompt_id, problem, answer) to key both")
    return [base] + [run.rekeyed(_to_base(base, run, name, base_name), base.problems)
                     for run, name in zip(inputs[1:], names[1:])]
