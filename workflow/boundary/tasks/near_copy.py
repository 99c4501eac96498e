"""Near-copies: a held-out prompt that repeats a training prompt, so its coverage is not held out.

A problem is normalised (lower case, every number -> `#`, punctuation dropped, white space
collapsed). A held-out prompt is a near-copy of a training prompt when either
- the Jaccard similarity of their normalised word 3-gram sets is at least `jaccard` (0.5: the
  same problem reworded a little, or with other numbers), or
- they share the gold answer and the multiset of numbers in the text, at least two of them
  (the same fact: the arithmetic studies' shared operand pairs; one shared number and answer
  is a coincidence in word problems).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

NUMBER = re.compile(r"\d+(?:[.,/]\d+)*")
WORD = re.compile(r"[a-z#]+")


def normalise(text: str) -> list[str]:
    """The problem's words after numbers became `#` and punctuation went."""
    return WORD.findall(NUMBER.sub(" # ", text.lower()))


def shingles(text: str, n: int = 3) -> set[tuple[str, ...]]:
    words = normalise(text)
    return {tuple(words[i:i + n]) for i in range(max(len(words) - n + 1, 1))} if words else set()


def fact(text: str, answer: str) -> tuple:
    """The gold answer and the multiset of numbers in the text."""
    return (str(answer).strip(), tuple(sorted(Counter(NUMBER.findall(text)).items())))


def near_copies(held_out, train, jaccard: float = 0.5) -> list[tuple[int, int, str]]:
    """(held-out index, train index, why) for every held-out prompt with a near-copy in `train`
    (the first found); items are (problem, answer) pairs. Why: 'text' or 'fact'."""
    index, sets, facts = defaultdict(set), [], {}
    for j, (problem, answer) in enumerate(train):
        s = shingles(problem)
        sets.append(s)
        for g in s:
            index[g].add(j)
        facts.setdefault(fact(problem, answer), j)
    found = []
    for i, (problem, answer) in enumerate(held_out):
        same = facts.get(fact(problem, answer))
        if same is not None and len(NUMBER.findall(problem)) >= 2:
            found.append((i, same, "fact"))
            continue
        s = shingles(problem)
        shared = Counter(j for g in s for j in index.get(g, ()))
        for j, inter in shared.most_common():
            if inter / len(s | sets[j]) >= jaccard:
                found.append((i, j, "text"))
                break
            if inter / max(len(s), 1) < jaccard:  # the largest overlaps come first
                break
    return found
