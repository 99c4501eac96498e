"""Adaptive draws: each prompt's samples in rounds, a prompt stopping once its label is settled.

`Adaptive` says how: the draws a prompt has after each round (the last is n) and
`settled({prompt_id: its first r completions})`, called with every prompt whose round has just
completed, which returns the prompt ids to stop. Sample k of a prompt is the full run's sample k
(the same (seed, prompt, k) stream, `streams`), so an adaptive run draws a prefix of each
prompt's full run. `Rounds` keeps the books for the hf decode loop (`hf.generate`'s feed): a
prompt's next round is queued as soon as its current one completes, while other prompts' rows
keep every seat busy (no barrier per round).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Adaptive:
    rounds: tuple[int, ...]  # draws after each round, increasing; the last is n
    settled: Callable[[dict[str, list[str]]], set[str]]  # {prompt_id: first r texts} -> ids that stop

    def after(self, r: int) -> int | None:
        """The draws of the round after r draws; None after the last."""
        return next((x for x in self.rounds if x > r), None)


class Rounds:
    """The rows of an adaptive run, for `hf.generate(feed=...)`: row j is (prompt index, sample
    index) `self.jobs[j]`, in the order rows were queued."""

    def __init__(self, prompt_ids: list[str], prompts: list[list[int]], adaptive: Adaptive,
                 decode: Callable[[list[list[int]]], list[str]]):
        self.prompt_ids, self.prompts, self.adaptive, self.decode = prompt_ids, prompts, adaptive, decode
        self.rows: list[list[int]] = [[] for _ in prompts]  # per prompt, its rows by sample index
        self.texts: list[list[str]] = [[] for _ in prompts]  # per prompt, its decoded completions
        self.finished = [0] * len(prompts)
        self.target = [0] * len(prompts)
        self.jobs: list[tuple[int, int]] = []
        self.running = set(range(len(prompts)))

    def _queue(self, i: int, upto: int) -> list[tuple[list[int], int]]:
        new = []
        for k in range(self.target[i], upto):
            self.rows[i].append(len(self.jobs))
            self.jobs.append((i, k))
            new.append((self.prompts[i], k))
        self.target[i] = upto
        return new

    def initial(self) -> list[tuple[list[int], int]]:
        return [row for i in range(len(self.prompts)) for row in self._queue(i, self.adaptive.rounds[0])]

    @property
    def capacity(self) -> int:
        """Rows that may still be queued."""
        return sum(self.adaptive.rounds[-1] - self.target[i] for i in self.running)

    @property
    def next_wave(self) -> int:
        """Rows the running prompts' next rounds may queue: the seats worth keeping free."""
        return sum((self.adaptive.after(self.target[i]) or self.target[i]) - self.target[i] for i in self.running)

    @property
    def open(self) -> bool:
        return bool(self.running)

    def more(self, finished_rows: list[int], results: list) -> list[tuple[list[int], int]]:
        complete = set()
        for row in finished_rows:
            i = self.jobs[row][0]
            self.finished[i] += 1
            if self.finished[i] == self.target[i]:
                complete.add(i)
        if not complete:
            return []
        order = sorted(i for i in complete if self.adaptive.after(self.target[i]) is not None)
        for i in complete.difference(order):  # its last round: n draws, nothing to decide
            self.running.discard(i)
        if not order:
            return []
        texts = iter(self.decode([results[row].tokens for i in order for row in self.rows[i][len(self.texts[i]):]]))
        prefixes = {}
        for i in order:
            self.texts[i] += [next(texts) for _ in range(self.target[i] - len(self.texts[i]))]
            prefixes[self.prompt_ids[i]] = list(self.texts[i])
        stop = self.adaptive.settled(prefixes)
        new = []
        for i in order:
            if self.prompt_ids[i] in stop:
                self.running.discard(i)
            else:
                new += self._queue(i, self.adaptive.after(self.target[i]))
        return new
