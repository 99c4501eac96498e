"""Adaptive draws: each prompt's samples in rounds, a prompt stopping once its label is settled.

`Adaptive` says how: the draws a prompt has after each round (the last is n) and
`settled({prompt_id: its first r completions})`, called with every prompt whose round prefix
has just completed, which returns the prompt ids to stop. Sample k of a prompt is the full run's
sample k (the same (seed, prompt, k) stream, `streams`), so an adaptive run draws a prefix of
each prompt's full run.

`Rounds` keeps the books for the hf decode loop (`hf.generate`'s feed). The loop pulls rows
(`take`) for every free seat: first the draws a running prompt's current round still lacks, then
look-ahead draws beyond it, breadth-first over the running prompts (fewest draws first), up to
n each. So the seats stay full while any running prompt has a draw left, whatever the rounds'
size. The stopping decision is still taken only on a round's complete, verified prefix
(`more`); a prompt that stops at r keeps its first r draws, its look-ahead rows still in flight
are cancelled (their seats freed) and the finished ones beyond r are dropped: the artifact is
each prompt's first n_i draws of the full run, and the look-ahead's cost is counted (`wasted`).
"""

from __future__ import annotations

import heapq
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
    index) `self.jobs[j]`, in the order rows were taken."""

    def __init__(self, prompt_ids: list[str], prompts: list[list[int]], adaptive: Adaptive,
                 decode: Callable[[list[list[int]]], list[str]]):
        self.prompt_ids, self.prompts, self.adaptive, self.decode = prompt_ids, prompts, adaptive, decode
        self.n = adaptive.rounds[-1]
        self.rows: list[list[int]] = [[] for _ in prompts]  # per prompt, its rows by sample index
        self.texts: list[list[str]] = [[] for _ in prompts]  # per prompt, its verified prefix's texts
        self.done: list[list[bool]] = [[] for _ in prompts]  # per prompt, by sample index: finished
        self.prefix = [0] * len(prompts)  # per prompt, its finished draws 0..prefix-1
        self.bound = [adaptive.rounds[0]] * len(prompts)  # per prompt, the round to decide next
        self.kept = [0] * len(prompts)  # per prompt, the draws it keeps (n_i) once it stops
        self.jobs: list[tuple[int, int]] = []
        self.running = set(range(len(prompts)))

    @property
    def capacity(self) -> int:
        """Rows that may still be taken."""
        return sum(self.n - len(self.rows[i]) for i in self.running)

    def _issue(self, i: int, count: int) -> list[tuple[list[int], int]]:
        new = []
        for k in range(len(self.rows[i]), len(self.rows[i]) + count):
            self.rows[i].append(len(self.jobs))
            self.done[i].append(False)
            self.jobs.append((i, k))
            new.append((self.prompts[i], k))
        return new

    def take(self, seats: int) -> list[tuple[list[int], int]]:
        """Up to `seats` new (prompt tokens, sample index) rows: the running prompts' current
        rounds first (a decision waits on them), then look-ahead, fewest draws first."""
        new = []
        for i in sorted(self.running):
            if len(new) >= seats:
                return new
            new += self._issue(i, min(seats - len(new), max(0, self.bound[i] - len(self.rows[i]))))
        heap = [(len(self.rows[i]), i) for i in self.running if len(self.rows[i]) < self.n]
        heapq.heapify(heap)
        while heap and len(new) < seats:
            have, i = heapq.heappop(heap)
            new += self._issue(i, 1)
            if have + 1 < self.n:
                heapq.heappush(heap, (have + 1, i))
        return new

    def more(self, finished_rows: list[int], results: list) -> list[int]:
        """Book the rows just finished; decide every running prompt whose current round's prefix
        is complete (one `settled` call per pass, a prompt's look-ahead may complete several
        rounds at once). Returns the rows still in flight to cancel: the draws of stopped
        prompts beyond their stop."""
        for row in finished_rows:
            i, k = self.jobs[row]
            self.done[i][k] = True
            while self.prefix[i] < len(self.done[i]) and self.done[i][self.prefix[i]]:
                self.prefix[i] += 1
        cancel = []
        while True:
            ready = sorted(i for i in self.running if self.prefix[i] >= self.bound[i])
            if not ready:
                return cancel
            for i in [i for i in ready if self.bound[i] == self.n]:  # n draws: nothing to decide
                self.running.discard(i)
                self.kept[i] = self.n
            ready = [i for i in ready if self.bound[i] < self.n]
            if not ready:
                continue
            texts = iter(self.decode([results[row].tokens for i in ready
                                      for row in self.rows[i][len(self.texts[i]):self.bound[i]]]))
            prefixes = {}
            for i in ready:
                self.texts[i] += [next(texts) for _ in range(self.bound[i] - len(self.texts[i]))]
                prefixes[self.prompt_ids[i]] = list(self.texts[i])
            stop = self.adaptive.settled(prefixes)
            for i in ready:
                if self.prompt_ids[i] in stop:
                    self.running.discard(i)
                    self.kept[i] = self.bound[i]
                    cancel += [row for k, row in enumerate(self.rows[i]) if k >= self.bound[i] and not self.done[i][k]]
                else:
                    self.bound[i] = self.adaptive.after(self.bound[i])

    def kept_rows(self) -> list[int]:
        """The rows written: each prompt's first n_i draws, in split order then sample index."""
        return [row for i in range(len(self.prompts)) for row in self.rows[i][:self.kept[i]]]
