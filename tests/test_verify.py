import time

import pandas as pd
import pytest

from boundary.core.errors import BoundaryError
from boundary.tasks.verify import Verifier, extract_answer, last_boxed, normalize_answer, score_samples


def test_extractors():
    assert last_boxed(r"a \boxed{1} then \boxed{\frac{1}{2}} end") == r"\frac{1}{2}"
    assert last_boxed("no box") == "" and last_boxed(r"\boxed{unclosed") == ""
    assert extract_answer(r"so $\boxed{ 3.5 }$.", "boxed") == "3.5"
    assert extract_answer("C7325", "last_number") == "7325"
    assert extract_answer("C", "last_number") == ""
    assert normalize_answer(r"$\left( 1, 2 \right)$.") == "(1,2)"


@pytest.fixture(scope="module")
def verifier():
    v = Verifier(timeout=5, workers=1)
    yield v
    v.close()


def test_math_verify_equivalences(verifier):
    golds = ["1234", r"\frac{1}{2}", "6 - 5i", r"1 - \sqrt{2}", "1234", "0123", "12"]
    answers = ["1234", "0.5", "6-5i", r"-\sqrt{2}+1", "4321", "0123", ""]
    assert verifier.check(golds, answers) == [True, True, True, True, False, True, False]


def test_checks_are_cached_per_pair(verifier):
    verifier.check(["77"], ["77"])
    start = time.perf_counter()
    assert verifier.check(["77"] * 1000, ["77"] * 1000) == [True] * 1000
    assert ("77", "77") in verifier._cache
    assert time.perf_counter() - start < 5  # a cache hit never reaches the pool


def test_score_samples_adds_answer_and_verdict(verifier):
    samples = pd.DataFrame({"prompt_id": ["a", "a", "b"], "completion": ["A1234", "B3412", "C"]})
    out = score_samples(samples, {"a": "1234", "b": "99"}, "last_number", verifier)
    assert out["answer"].tolist() == ["1234", "3412", ""]
    assert out["correct"].tolist() == [True, False, False]
    assert out["verified"].tolist() == [True, True, True]


def stuck_on_slow(gold, answer, timeout):
    """A stand-in for a math-verify check stuck in C code: 'slow' never returns in time."""
    import time as _time

    if answer == "slow":
        _time.sleep(120)
    return gold == answer


def dies_once(gold, answer, timeout):
    """Kills its own worker the first time it sees answer 'die' (the gold names a flag file)."""
    import os
    import signal
    from pathlib import Path

    if answer == "die" and not Path(gold).exists():
        Path(gold).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    if answer == "always-die":
        os.kill(os.getpid(), signal.SIGKILL)
    return gold == answer


def slow_equal(gold, answer, timeout):
    import time as _time

    _time.sleep(0.002)
    return gold == answer


def logs_the_answer(gold, answer, timeout):
    """What math-verify does when a parse times out: log the whole text."""
    import logging

    logging.getLogger("math_verify.parser").warning(f"Timeout during parsing: {answer}")
    return False


def cannot_import(gold, answer, timeout):
    raise ImportError("No module named 'math_verify'")


class ExitsOnLoad:
    """Unpickled in a fresh worker, it ends that process: a worker that cannot start."""

    def __reduce__(self):
        import os

        return os._exit, (3,)


def test_a_stuck_check_is_killed_and_left_unverified():
    v = Verifier(timeout=1, workers=1, chunk=4, check_one=stuck_on_slow)
    try:
        got = v.verdicts(["1", "2", "3", "4", "5"], ["1", "slow", "3", "x", "5"])
        assert got == [True, None, True, False, True]  # None: given up, not scored wrong
        assert (v.given_up, v.replaced) == (1, 1)
        assert v.check(["2"], ["slow"]) == [False]  # cached: never waited out twice
        assert v.given_up == 1
    finally:
        v.close()


def test_a_killed_worker_is_replaced_and_its_check_retried(tmp_path):
    flag = str(tmp_path / "died")
    v = Verifier(timeout=5, workers=2, chunk=8, check_one=dies_once)
    try:
        golds = [str(i) for i in range(40)] + [flag, "g"]
        answers = [str(i) if i % 3 else "no" for i in range(40)] + ["die", "always-die"]
        got = v.verdicts(golds, answers)
        assert got[:40] == [bool(i % 3) for i in range(40)]
        assert got[40] is False  # its worker died under it once; the retry answered
        assert got[41] is None  # it killed its worker twice: given up, unverified
        assert (v.given_up, v.replaced) == (1, 3)
    finally:
        v.close()


def stalls_once(gold, answer, timeout):
    """slow_equal, except that the first "stall" answer's worker writes its pid to $STALL_FLAG
    and waits there, mid-chunk, to be killed (the retry then answers)."""
    import os
    import time as _time

    if answer == "stall":
        try:
            fd = os.open(os.environ["STALL_FLAG"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return gold == answer
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        _time.sleep(60)
    return slow_equal(gold, answer, timeout)


def test_a_worker_killed_from_outside_is_noticed_and_replaced(monkeypatch, tmp_path):
    """A worker SIGKILLed mid-chunk (the OOM killer, say): its chunk is redone by a new worker,
    no verdict is lost. The kill waits until the worker holds work, whatever the machine's load
    (a kill on a timer could land after the last chunk and find nothing to notice)."""
    import os
    import signal
    import threading
    import time

    flag = tmp_path / "stalled"
    monkeypatch.setenv("STALL_FLAG", str(flag))
    v = Verifier(timeout=30, workers=2, chunk=16, check_one=stalls_once)

    def kill_the_stalled_worker():
        while not flag.exists() or not flag.read_text():
            time.sleep(0.01)
        os.kill(int(flag.read_text()), signal.SIGKILL)

    try:
        v.check(["0"], ["0"])  # the pool is up
        killer = threading.Thread(target=kill_the_stalled_worker, daemon=True)
        killer.start()
        golds = [str(i) for i in range(1500)]
        answers = [g if int(g) % 2 else "x" for g in golds]
        answers[700] = "stall"
        got = v.verdicts(golds, answers)
        killer.join(timeout=1)
        victim = int(flag.read_text())
        assert got == [bool(i % 2) for i in range(1500)]  # every verdict computed, none lost
        assert v.replaced == 1 and v.given_up == 0
        assert victim not in [w.process.pid for w in v._workers]
    finally:
        v.close()


def equal(gold, answer, timeout):
    """A check without math-verify: its worker starts at once."""
    return gold == answer


def test_workers_start_as_the_work_needs_them():
    """A worker holds two chunks at a time: a batch one worker takes whole starts no second
    (a worker's start is math-verify's import, seconds of CPU); a larger batch grows the pool,
    up to `workers`."""
    v = Verifier(timeout=5, workers=3, chunk=4, check_one=equal)
    try:
        assert v.check(["1"] * 8, [str(i) for i in range(8)]) == [i == 1 for i in range(8)]
        assert len(v._workers) == 1
        assert v.check([str(i) for i in range(100)], [str(i) for i in range(100)]) == [True] * 100
        assert len(v._workers) == 3
    finally:
        v.close()


@pytest.mark.parametrize("check_one, why", [
    (ExitsOnLoad(), "exit code 3 before it was ready"),
    (cannot_import, "ImportError: No module named 'math_verify'"),
])
def test_a_pool_that_cannot_start_raises_one_line(check_one, why):
    v = Verifier(timeout=1, workers=2, check_one=check_one)
    with pytest.raises(BoundaryError) as err:
        v.check(["1"], ["1"])
    assert str(err.value) == f"verifier: its worker processes cannot start ({why})"
    assert v._workers == []  # nothing left running


def test_a_math_verify_timeout_is_unverified(monkeypatch):
    """math-verify answers [] / False when its own alarm fires: that is no verdict."""
    import math_verify

    from boundary.tasks import verify

    def parse_times_out(text, parsing_timeout):
        time.sleep(parsing_timeout)
        return []

    verify._parsed.cache_clear()
    monkeypatch.setattr(math_verify, "parse", parse_times_out)
    try:
        assert verify._check("1", "2", 1) is None
    finally:
        verify._parsed.cache_clear()


def test_extractors_for_models_that_do_not_box():
    from boundary.tasks.verify import extract_answer

    text = "She has 1,234 apples, then 18 more. \\boxed{\\frac{1}{2}}"
    assert extract_answer(text, "boxed") == "\\frac{1}{2}"
    assert extract_answer("So she pays $1,250.50 in total.", "last_number") == "1250.50"
    assert extract_answer("The answer is 18.", "boxed_or_last_number") == "18"
    assert extract_answer(text, "boxed_or_last_number") == "\\frac{1}{2}"
    assert extract_answer("no digits here", "boxed_or_last_number") == ""


def test_a_long_answer_math_verify_logs_is_shortened(capfd):
    v = Verifier(timeout=1, workers=1, check_one=logs_the_answer)
    try:
        v.check(["1"], ["x" * 100_000])
    finally:
        v.close()
    logged = [line for line in capfd.readouterr().err.splitlines() if "Timeout during parsing" in line]
    assert logged == ["Timeout during parsing: 1", f"Timeout during parsing: {'x' * 176}... (100024 characters)"]
