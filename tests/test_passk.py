"""pass@k against the direct binomial formula 1 - C(n-c, k) / C(n, k) (math.comb, exact)."""

from fractions import Fraction
from math import comb

import numpy as np
import pandas as pd
import pytest

from boundary.core.passk import add_pass_at_k, counts_of, pass_at_k, passk_curve, usable_ks


def direct(n, c, k):
    return float(1 - Fraction(comb(n - c, k), comb(n, k)))  # comb(m, k) = 0 for m < k


@pytest.mark.parametrize("n", [1, 2, 5, 16, 64, 256, 300])
def test_matches_binomial_formula_for_every_c_and_k(n):
    c = np.arange(n + 1)
    for k in sorted({1, 2, 4, 16, 64, 256, n} & set(range(1, n + 1))):
        got = pass_at_k(np.full(n + 1, n), c, k)
        want = np.array([direct(n, ci, k) for ci in c])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_edges_are_exact():
    assert pass_at_k(256, 0, 256)[()] == 0.0            # c = 0
    assert pass_at_k(256, 256, 1)[()] == 1.0            # c = n
    assert pass_at_k(256, 1, 256)[()] == 1.0            # n - c < k
    assert pass_at_k(10, 3, 8)[()] == 1.0               # n - c = 7 < 8
    assert pass_at_k(10, 3, 7)[()] == pytest.approx(1 - 1 / comb(10, 7))
    assert pass_at_k(256, 1, 1)[()] == pytest.approx(1 / 256)


def test_vectorised_over_mixed_n_and_large_arrays():
    rng = np.random.default_rng(0)
    n = rng.integers(16, 300, 500)
    c = rng.integers(0, n + 1)
    got = pass_at_k(n, c, 16)
    want = [direct(int(a), int(b), 16) for a, b in zip(n, c)]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 0)


def test_modal_answer_and_share_per_prompt():
    """A policy that answers "1" to everything shows modal share 1 whatever its verdicts; a
    diverse one a small share; a prompt nobody answered 0 (null and empty answers are no
    answer, yet count in n); ties go to the smallest text."""
    rows = ([("constant", "1", False)] * 8 + [("diverse", str(j), j == 0) for j in range(8)]
            + [("silent", None, False)] * 4 + [("silent", "", False)] * 4
            + [("tie", a, False) for a in ("7", "3", "7", "3", None, None, None, None)])
    samples = pd.DataFrame(rows, columns=["prompt_id", "answer", "correct"])
    out = counts_of(samples).set_index("prompt_id")
    assert out.loc["constant", ["modal_answer", "modal_share"]].tolist() == ["1", 1.0]
    assert out.loc["diverse", ["modal_answer", "modal_share"]].tolist() == ["0", 1 / 8]
    assert out.loc["silent", ["modal_answer", "modal_share"]].tolist() == ["", 0.0]
    assert out.loc["tie", ["modal_answer", "modal_share"]].tolist() == ["3", 2 / 8]
    assert out.loc["diverse", "answers"] == ["0"] and out.loc["constant", "answers"] == []
    assert "modal_share" not in counts_of(samples.drop(columns="answer"))  # no answers: not measured


def test_population_curve_and_columns():
    df = pd.DataFrame({"n": [8, 8, 8], "c": [0, 1, 8]})
    out = add_pass_at_k(df, (1, 4, 16))
    assert "pass_at_16" not in out.columns  # k > n is not estimable
    assert usable_ks([8, 16], (1, 4, 16)) == [1, 4]
    curve = passk_curve(df["n"], df["c"], (1, 4))
    assert curve[1] == pytest.approx((0 + 1 / 8 + 1) / 3)
    assert curve[4] == pytest.approx((0 + direct(8, 1, 4) + 1) / 3)


def test_memory_does_not_grow_with_the_largest_c():
    """n = 10^6: the estimate is the same product, computed in bounded blocks (a grid of
    prompts x max c would be 320 MB here)."""
    import tracemalloc

    from boundary.core.passk import _product_form

    rng = np.random.default_rng(0)
    n = np.full(40, 10**6)
    c = rng.integers(0, 10**6, 40)
    c[:5] = [0, 1, 2, 10**6 - 256, 10**6]
    tracemalloc.start()
    got = pass_at_k(n, c, 256)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 2**20
    small_blocks = _product_form(n, c, 256, budget=4096)
    np.testing.assert_allclose(got, small_blocks, rtol=1e-12, atol=0)
    for i in range(8):  # human-eval's estimate_pass_at_k, one prompt at a time
        want = 1.0 if n[i] - c[i] < 256 else 1.0 - np.prod(1.0 - 256 / np.arange(n[i] - c[i] + 1, n[i] + 1))
        assert got[i] == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_every_k_at_once_matches_the_combinatorial_form():
    from math import comb

    from boundary.core.passk import pass_at_k_all

    n = np.array([40, 40, 40, 64, 7])
    c = np.array([0, 1, 39, 17, 7])
    table = pass_at_k_all(n, c, 7)
    for i in range(len(n)):
        for k in range(1, 8):
            assert table[i, k - 1] == pytest.approx(1 - comb(n[i] - c[i], k) / comb(n[i], k), abs=1e-12)
    with pytest.raises(ValueError):
        pass_at_k_all(n, c, 8)
