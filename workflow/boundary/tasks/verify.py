"""Answer extraction and math-verify checking, in worker processes with hard timeouts.

math-verify's own timeout uses SIGALRM, which only works in a main thread and cannot
interrupt C-level sympy work, so every check runs in a worker process that is killed when it
overruns. Checks are deduplicated on (gold, extracted answer) and cached for the process's
life: RL rewards and n=256 evaluations repeat the same pairs many times. A check that ran out
of time or crashed its worker is unverified (None), never silently False.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing as mp
import pickle
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from boundary.core.errors import BoundaryError
from boundary.core.settings import defaults

VERIFY = defaults("verify")  # the config's verify section's defaults (the schema's)

EXTRACTORS = ("boxed", "last_number", "boxed_or_last_number")
_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:/\d+)?")


def last_boxed(text: str) -> str:
    """Content of the last \\boxed{...} (or \\fbox{...}), braces matched; '' if none."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return ""
    brace = text.find("{", start)
    if brace < 0:
        return ""
    depth = 0
    for i in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[brace + 1:i]
    return ""


def last_number(text: str) -> str:
    """The last number in the text, thousands separators dropped ('1,234.5' -> '1234.5')."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else ""


def extract_answer(completion: str, style: str) -> str:
    if style == "boxed":
        return normalize_answer(last_boxed(completion))
    if style == "last_number":
        return last_number(completion)
    if style == "boxed_or_last_number":
        return normalize_answer(last_boxed(completion)) or last_number(completion)
    raise ValueError(f"unknown answer extractor {style!r} (one of {EXTRACTORS})")


def normalize_answer(answer: str) -> str:
    """A canonical string for counting distinct answers; correctness is math-verify's job."""
    answer = answer.strip().rstrip(".").strip().strip("$").strip()
    answer = re.sub(r"\\(left|right|!|,|;|:)", "", answer)
    answer = re.sub(r"\s+", "", answer)
    return answer.rstrip(".")


@functools.lru_cache(maxsize=200_000)
def _parsed(text: str, timeout: int):
    """math-verify parse of one string, cached in the worker: parsing is ~40x verify's cost
    and the same gold or answer string recurs across samples and prompts. None when the parse
    ran out of time (math-verify then returns [] as for an unparsable string)."""
    from math_verify import parse

    # Wrapped so it parses as LaTeX ("1 - \\sqrt{2}" bare parses as 1); timeouts must be
    # ints (a float makes parse() return [] silently).
    start = time.monotonic()
    found = parse(f"${text}$", parsing_timeout=timeout)
    # Its SIGALRM fires at `timeout` s: an empty result that took that long timed out.
    return None if not found and time.monotonic() - start >= timeout else found


def _check(gold: str, answer: str, timeout: int) -> bool | None:
    """math-verify's verdict on one pair; None (unverified) where a parse or the comparison
    ran out of time, which math-verify itself would report as False."""
    from math_verify import verify

    gold_parsed, answer_parsed = _parsed(gold, timeout), _parsed(answer, timeout)
    if gold_parsed is None or answer_parsed is None:
        return None
    if not gold_parsed or not answer_parsed:
        return False
    start = time.monotonic()
    if verify(gold_parsed, answer_parsed, timeout_seconds=timeout):
        return True
    return None if time.monotonic() - start >= timeout else False


LOGGED = 200  # characters of a message math-verify may write into a stage's log


class _Shortened(logging.Filter):
    """math-verify logs the whole text it timed out on ("Timeout during parsing: <text>"): one
    100k-character completion per timeout would flood the log. Its start and length stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if len(message) > LOGGED:
            record.msg, record.args = f"{message[:LOGGED]}... ({len(message)} characters)", None
        return True


def shorten_math_verify_logs() -> None:
    for name in ("math_verify.parser", "math_verify.grader", "math_verify.metric"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Shortened) for f in logger.filters):
            logger.addFilter(_Shortened())


_READY = "ready"
_PIPE_SAFE = 16_384  # bytes: well under a pipe's buffer (64 KiB on Linux)


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when the thread that started it ends (in practice the
    stage's process), so a killed stage never leaves a worker stuck in sympy behind. A worker
    lost any other way is replaced like a dead one. A SIGTERM sent to every process of a job
    (SLURM's --signal) is the stage's to act on: the worker ignores it and ends with the stage."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _serve(conn, progress, check_one: Callable, timeout: int) -> None:
    """A worker: check the pairs of each chunk it is sent and send back their verdicts.

    Before each pair it writes the time and its count of pairs begun into `progress` (shared
    memory): the parent knows when the pair in hand began without a message per pair."""
    _die_with_parent()
    shorten_math_verify_logs()
    try:
        check_one("1", "1", timeout)  # import math-verify and warm up before saying ready
    except BaseException as err:
        conn.send(("error", _one_line(err)))
        raise
    conn.send(_READY)
    begun = 0
    while True:
        try:
            chunk = conn.recv()
        except EOFError:  # the parent is gone
            return
        if chunk is None:
            return
        verdicts = []
        for gold, answer in chunk:
            progress[1] = time.monotonic()  # the time first: a count read later matches it
            begun += 1
            progress[0] = begun
            verdicts.append(check_one(gold, answer, timeout))
        conn.send(verdicts)


@dataclass
class _Worker:
    process: object
    conn: object
    progress: object  # shared [pairs begun, time the last one began]
    started: float
    ready: bool = False
    sent: deque = field(default_factory=deque)  # pairs sent and not yet answered, in order
    chunks: deque = field(default_factory=deque)  # sizes of the chunks in flight
    answered: int = 0
    since: float = 0.0  # the last dispatch to an idle worker or answer: a floor for "began"
    error: str = ""

    def in_hand(self) -> tuple[int, float] | None:
        """(index in `sent`, start time) of the pair being checked, None if none has begun."""
        begun, began = int(self.progress[0]) - self.answered, self.progress[1]
        return (begun - 1, max(began, self.since)) if begun > 0 else None


@dataclass
class Verifier:
    """Checks (gold, answer) pairs with math-verify in worker processes, each check bounded.

    Workers start as the work needs them (one for every two chunks pending, at most `workers`),
    get chunks of pairs (the next one queued while they work) and record in shared
    memory when each pair began, so every check has its own deadline: 2 x timeout + 1 s after
    it began (math-verify stops itself at `timeout` per parse and comparison, except in C
    code). A check past its deadline has its worker killed and replaced and is given up on; a
    worker that dies is noticed at once (its process sentinel) and replaced, and the check it
    held is retried once, then given up on. A pair given up on is unverified -- `verdicts`
    gives None, `check` gives False, and `given_up` counts it -- never a verdict nobody
    computed. Workers that keep dying before they are ready mean the pool cannot start: one
    BoundaryError, never a column of False.
    """

    timeout: int = VERIFY["timeout"]
    workers: int = VERIFY["workers"]
    chunk: int = 64
    check_one: Callable = _check  # module-level, so spawned workers can import it
    start_timeout: float = 120.0  # seconds a new worker may take to import math-verify

    def __post_init__(self):
        self.timeout = int(self.timeout)
        self._cache: dict[tuple[str, str], bool | None] = {}
        self._workers: list[_Worker] = []
        self._failed_starts = 0
        self.given_up = 0  # distinct pairs left unverified
        self.replaced = 0  # workers killed or found dead, and replaced

    # ------------------------------------------------------------------ pool
    def _spawn(self) -> _Worker:
        # spawn, not fork: the parent may hold torch threads that fork would copy mid-lock.
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        progress = ctx.RawArray("d", 2)
        process = ctx.Process(target=_serve, args=(child, progress, self.check_one, self.timeout), daemon=True)
        try:
            process.start()
        except Exception as err:
            raise BoundaryError(f"verifier: cannot start a worker process ({_one_line(err)})") from None
        finally:
            child.close()
        return _Worker(process, parent, progress, time.monotonic())

    def _stop(self, worker: _Worker) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(5)
        worker.conn.close()

    def _replace(self, worker: _Worker) -> None:
        self._stop(worker)
        self._workers[self._workers.index(worker)] = self._spawn()

    def _start_failed(self, worker: _Worker, why: str) -> None:
        """A worker died (or hung) before it was ready; enough of those in a row: no pool."""
        self._failed_starts += 1
        if self._failed_starts >= max(2, self.workers):
            self.close()
            raise BoundaryError(f"verifier: its worker processes cannot start ({worker.error or why})")
        self._replace(worker)

    def close(self):
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except OSError:
                pass
            self._stop(worker)
        self._workers = []

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the pool's modules may already be gone
            pass

    # ------------------------------------------------------------------ checking
    def check(self, golds: list[str], answers: list[str]) -> list[bool]:
        """True where math-verify says equal; False otherwise, unverified pairs included
        (use `verdicts` to tell them apart)."""
        return [v is True for v in self.verdicts(golds, answers)]

    def verdicts(self, golds: list[str], answers: list[str]) -> list[bool | None]:
        """True / False per pair, None for a pair the verifier gave up on."""
        pairs = list(zip(golds, answers))
        for pair in pairs:
            if not pair[1]:
                self._cache[pair] = False
        pending = deque(sorted({p for p in pairs if p not in self._cache}))
        if pending:
            self._run(pending)
        return [self._cache[p] for p in pairs]

    def _run(self, pending: deque) -> None:
        limit = 2 * self.timeout + 1
        crashes: dict[tuple[str, str], int] = {}
        # A worker for every two chunks pending (what `_dispatch` keeps in flight on one), up to
        # `workers`: a batch that one worker takes whole never starts another (math-verify's
        # import, seconds of CPU) to leave it idle. The pool grows when a larger batch comes.
        while len(self._workers) < min(self.workers, -(-len(pending) // (2 * self.chunk))):
            self._workers.append(self._spawn())
        while pending or any(w.sent for w in self._workers):
            for w in self._workers:
                self._dispatch(w, pending)
            deadlines = [self._deadline(w, limit) for w in self._workers if w.sent or not w.ready]
            wait([x for w in self._workers for x in (w.conn, w.process.sentinel)],
                 timeout=max(0.0, min(deadlines) - time.monotonic()) if deadlines else None)
            for w in list(self._workers):
                self._collect(w)
                if not w.process.is_alive():
                    self._collect(w)  # verdicts it sent just before dying
                    if not w.ready:
                        self._start_failed(w, f"exit code {w.process.exitcode} before it was ready")
                        continue
                    hand = w.in_hand()
                    if hand is not None:  # the pair in hand is retried once, then given up on
                        pair = w.sent[hand[0]]
                        crashes[pair] = crashes.get(pair, 0) + 1
                        if crashes[pair] >= 2:
                            del w.sent[hand[0]]
                            self._give_up(pair)
                    self._lose(w, pending)
                elif not w.ready and time.monotonic() > w.started + self.start_timeout:
                    self._start_failed(w, f"not ready after {self.start_timeout:.0f} s")
                elif w.sent and time.monotonic() > self._deadline(w, limit):
                    hand = w.in_hand()  # stuck, likely in C code: only a kill stops it
                    if hand is not None:
                        self._give_up(w.sent[hand[0]])
                        del w.sent[hand[0]]
                    self._lose(w, pending)

    def _dispatch(self, w: _Worker, pending: deque) -> None:
        """Keep a ready worker at two chunks in flight; the second waits in its pipe, so it never
        idles for a reply. Only a small chunk is queued behind a running one: a send that fills
        the pipe would block until the worker reads, and it could be stuck."""
        while w.ready and pending and len(w.chunks) < 2:
            chunk = [pending.popleft() for _ in range(min(self.chunk, len(pending)))]
            payload = pickle.dumps(chunk, pickle.HIGHEST_PROTOCOL)
            if w.chunks and len(payload) > _PIPE_SAFE:
                pending.extendleft(reversed(chunk))
                return
            if not w.chunks:
                w.since = time.monotonic()
            w.sent.extend(chunk)
            w.chunks.append(len(chunk))
            try:
                w.conn.send_bytes(payload)
            except OSError:  # died meanwhile: its sentinel says so
                return

    def _deadline(self, w: _Worker, limit: float) -> float:
        if not w.ready:
            return w.started + self.start_timeout
        hand = w.in_hand()
        return (hand[1] if hand else w.since) + limit

    def _lose(self, w: _Worker, pending: deque) -> None:
        """Replace a dead or killed worker; its unanswered pairs go back to the queue."""
        self.replaced += 1
        pending.extendleft(reversed(w.sent))
        self._replace(w)

    def _collect(self, w: _Worker) -> None:
        """Read every message the worker has sent so far."""
        try:
            while w.conn.poll():
                message = w.conn.recv()
                if message == _READY:
                    w.ready, self._failed_starts = True, 0
                elif isinstance(message, tuple):
                    w.error = message[1]
                else:
                    for verdict in message:
                        self._record(w.sent.popleft(), verdict)
                    w.answered += len(message)
                    w.chunks.popleft()
                    w.since = time.monotonic()
        except (EOFError, OSError):
            pass

    def _record(self, pair: tuple[str, str], verdict: bool | None) -> None:
        self._cache[pair] = verdict
        self.given_up += verdict is None

    def _give_up(self, pair: tuple[str, str]) -> None:
        self._record(pair, None)


def score_samples(samples, golds_by_prompt: dict[str, str], extractor: str,
                  verifier: Verifier, log=print):
    """Add `answer` (normalized extraction), `correct` (math-verify) and `verified` to a samples
    frame; an answer the verifier gave up on has verified False and correct False, and the
    stage's log counts them."""
    samples["answer"] = [extract_answer(t, extractor) for t in samples["completion"]]
    golds = [golds_by_prompt[p] for p in samples["prompt_id"]]
    verdicts = verifier.verdicts(golds, samples["answer"].tolist())
    samples["correct"] = [v is True for v in verdicts]
    samples["verified"] = [v is not None for v in verdicts]
    unverified = len(verdicts) - int(samples["verified"].sum())
    log(f"verify: {len(verdicts)} answers, {unverified} unverified"
        + (f" (a check overran {2 * verifier.timeout + 1} s or crashed its worker; counted not correct)"
           if unverified else ""))
    return samples


def unextracted_warning(answers, extractor: str, label) -> str | None:
    """The one-line warning (without its "warning: " lead) when the extractor found no answer in
    most completions: most likely the wrong extractor (or prompt) for the benchmark, and every
    count would read 0 without a word. `label` names the split or file."""
    answers = list(answers)
    missing = sum(a == "" for a in answers) / len(answers) if answers else 0.0
    if missing <= 0.5:
        return None
    return f"{label}: extractor {extractor!r} found no answer in {missing:.0%} of {len(answers)} completions"
