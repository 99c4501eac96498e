"""Adaptive calibration: the stopping rule's error bound (by exact computation and by
simulation against the full run's label), exact settling, and the sampler's rounds drawing an
exact prefix of the full run's samples."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from boundary.analysis.adaptive import StoppingRule, rounds_of
from boundary.analysis.regimes import label

N = 256
ROUNDS = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240)
# p at and beside every cut (OutOfReach/Boundary at C = 0/1, 0.10, 0.60) and between them
PS = (0.0, 0.001, 1 / 256, 0.01, 0.05, 0.098, 0.1, 0.102, 0.2, 0.3, 0.45, 0.59, 0.6, 0.61, 0.8, 0.97)


@pytest.fixture(scope="module")
def rule():
    return StoppingRule(N, ROUNDS, 0.05)  # a large delta, so that errors happen and are counted


def _simulate(rule, p, prompts, rng):
    """(adaptive labels, full labels, draws) of `prompts` simulated prompts of success rate p: the
    adaptive run sees a prefix of the same outcomes the full run sees."""
    outcomes = rng.random((prompts, rule.n)) < p
    counts = np.cumsum(outcomes, axis=1)
    draws = np.full(prompts, rule.n)
    for r in reversed(rule.rounds[:-1]):  # the first round whose prefix is settled
        stop = rule.table[r][counts[:, r - 1]]
        draws[stop] = r
    c = counts[np.arange(prompts), draws - 1]
    return label(c / draws, rule.thresholds), label(counts[:, -1] / rule.n, rule.thresholds), draws


def test_rounds_are_capped_at_n_and_end_at_n():
    assert rounds_of(64, [16, 32, 48, 64, 96]) == (16, 32, 48, 64)
    assert rounds_of(256, [256, 16, 16, 300]) == (16, 256)
    assert StoppingRule(20, [16, 32], 0.01).rounds == (16, 20)


def test_the_certified_bound_holds_for_every_p_exactly(rule):
    """The exact P_p(adaptive label != full label) over a fine grid of p stays under the certified
    bound, which is under delta; the rule stops early for most p away from the cuts."""
    tau, table, bound = rule.design
    assert 0 < bound <= rule.delta and tau > 0
    p = np.linspace(0, 1, 4001)
    wrong, draws = rule.error_and_draws(table, p)
    assert wrong.max() <= bound
    assert draws[(p > 0.2) & (p < 0.4)].max() < 0.6 * N  # Reachable's middle settles early
    assert draws[p == 0].item() == N  # p_base = 0 (OutOfReach) needs every draw


@pytest.mark.parametrize("p", PS)
def test_the_misclassification_rate_against_the_full_run_stays_under_delta(rule, p):
    """Simulated Bernoulli prompts: the share whose adaptive label differs from the full run's
    label is under delta (with a 4-sigma allowance for the simulation), and agrees with the
    exact error of the dynamic program."""
    prompts = 20_000
    adaptive, full, draws = _simulate(rule, p, prompts, np.random.default_rng(int(p * 1e6)))
    rate = float(np.mean(adaptive != full))
    exact, expected = (float(x[0]) for x in rule.error_and_draws(rule.table, [p]))
    sigma = np.sqrt(max(exact, 1e-4) / prompts)
    assert rate <= rule.delta + 4 * np.sqrt(rule.delta / prompts)
    assert abs(rate - exact) <= 4 * sigma
    assert abs(draws.mean() - expected) <= 4 * draws.std() / np.sqrt(prompts) + 1e-9


def test_delta_zero_stops_only_where_the_label_is_settled_exactly():
    """delta 0: a prompt stops before n only where every completion of its remaining draws gives
    the full run the label its prefix has, so the labels are identical, always."""
    rule = StoppingRule(N, ROUNDS, 0.0)
    full = rule.full_labels()
    stops = 0
    for r in rule.rounds[:-1]:
        for c in np.flatnonzero(rule.table[r]):
            assert set(full[c:c + N - r + 1]) == {label(np.array([c / r]))[0]}, (r, c)
            stops += 1
    assert stops > 0
    for p in PS:
        adaptive, full_labels, _ = _simulate(rule, p, 2000, np.random.default_rng(1))
        assert (adaptive == full_labels).all()


def test_a_round_other_than_the_rules_is_refused(rule):
    with pytest.raises(ValueError):
        rule.next_round(17, 3)
    assert rule.next_round(N, 0) is None


# -- the sampler ---------------------------------------------------------------------------------

PROMPTS = {"a": "12+34=", "b": "5+6=", "c": "1234+5678=", "d": "7+8="}


def _params(**kw):
    from boundary.sampling import SamplingParams

    return SamplingParams(**{"n": 12, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8, "seed": 5,
                             "batch_size": 5, **kw})


def test_adaptive_rounds_draw_a_prefix_of_the_full_runs_samples(tiny_model_dir):
    """hf: each prompt's adaptive samples are the first n_i rows of the full run's (same (seed,
    prompt, index) streams, other batches and refills), and settle sees each round's prefix
    once it is complete, in sample order."""
    from boundary.sampling import sample
    from boundary.sampling.rounds import Adaptive

    ids, texts = list(PROMPTS), list(PROMPTS.values())
    full = sample(str(tiny_model_dir), ids, texts, _params())
    stop_at = {"a": 4, "b": 8, "c": 12, "d": 4}
    seen = []

    def settled(prefixes):
        for pid, drawn in prefixes.items():
            seen.append((pid, len(drawn)))
            assert drawn == full[full["prompt_id"] == pid]["completion"].head(len(drawn)).tolist()
        return {pid for pid, drawn in prefixes.items() if len(drawn) >= stop_at[pid]}

    for batch in (3, 64):
        adaptive = sample(str(tiny_model_dir), ids, texts, _params(batch_size=batch),
                          adaptive=Adaptive((4, 8, 12), settled))
        assert adaptive.groupby("prompt_id", sort=False).size().to_dict() == stop_at
        assert adaptive["prompt_id"].drop_duplicates().tolist() == ids  # the split's order
        for pid, rows in adaptive.groupby("prompt_id"):
            prefix = full[full["prompt_id"] == pid].head(len(rows))
            pd.testing.assert_frame_equal(rows.reset_index(drop=True), prefix.reset_index(drop=True))
    assert sorted(set(seen)) == [("a", 4), ("b", 4), ("b", 8), ("c", 4), ("c", 8), ("d", 4)]


def test_the_seats_stay_full_while_running_prompts_have_draws_left(tiny_model_dir):
    """16 prompts, rounds of 4 to n = 16, 48 seats: a round is 64 rows, so a prompt's next round
    waiting on its current one would leave seats empty. With look-ahead every decode step holds a
    row in every seat while the feed has a draw left to give; the artifact is still each prompt's
    first n_i draws of the full run, and what was drawn beyond a stop is counted, not written."""
    from boundary.sampling import hf
    from boundary.sampling.models import load_model
    from boundary.sampling.rounds import Adaptive, Rounds

    model, tokenizer = load_model(str(tiny_model_dir))
    stop, pad = hf.stop_and_pad(model, tokenizer)
    ids = [f"p{i}" for i in range(16)]
    encoded = tokenizer([f"{i}+{i * 7}=" for i in range(16)], add_special_tokens=False)["input_ids"]
    stop_at = {pid: 4 * (1 + i % 4) for i, pid in enumerate(ids)}  # 4, 8, 12, 16 draws
    seen = []

    def settled(prefixes):
        seen.extend((pid, len(t)) for pid, t in prefixes.items())
        return {pid for pid, t in prefixes.items() if len(t) >= stop_at[pid]}

    kw = dict(max_new=8, temperature=1.0, top_p=1.0, batch_size=48, seed=5)
    feed = Rounds(ids, encoded, Adaptive((4, 8, 12, 16), settled), lambda t: tokenizer.batch_decode(t))
    profile = {}
    out = hf.generate(model, [], stop, pad, feed=feed, profile=profile, **kw)
    occupancy = profile["occupancy"]
    assert profile["seats"] == 48
    busy = [held for held, left in occupancy if left > 0]
    assert len(busy) > 0 and all(held == 48 for held in busy)
    # every prompt's kept rows are its first n_i draws, sample k from stream k: the full run's
    full = hf.generate(model, [p for p in encoded for _ in range(16)], stop, pad, **kw)
    kept = feed.kept_rows()
    assert len(kept) == sum(stop_at.values())
    for j in kept:
        i, k = feed.jobs[j]
        assert feed.kept[i] == stop_at[ids[i]] and k < feed.kept[i]
        assert out[j].tokens == full[16 * i + k].tokens
    assert {(pid, r) for pid, r in seen} == {(pid, r) for pid, n in stop_at.items() for r in (4, 8, 12) if r <= n}
    drawn = [c for c in out if c is not None]
    assert len(drawn) == len(out) > len(kept)  # look-ahead was drawn, and every row is accounted for
    assert all(c.finish_reason in ("stop", "length", "cancelled") for c in drawn)


def test_adaptive_with_vllm_is_refused_in_one_line():
    from boundary.core.errors import BoundaryError
    from boundary.sampling import sample
    from boundary.sampling.rounds import Adaptive

    with pytest.raises(BoundaryError, match="needs sampling.backend: hf"):
        sample("unused", ["a"], ["1+1="], _params(backend="vllm"), adaptive=Adaptive((4, 12), lambda p: set()))


def test_scored_samples_stop_each_prompt_by_its_verified_prefix(tiny_model_dir):
    """sample-and-verify with a rule: a prompt's rounds go on while the rule says so, from the
    correct count of its verified prefix; the samples written are scored like a full run's."""
    from boundary.sampling.scoring import scored_samples
    from boundary.tasks.verify import Verifier

    class Rule:  # stops a prompt at its first round with no correct sample, else at n
        rounds = (4, 8, 12)
        calls = []

        def next_round(self, r, c):
            self.calls.append((r, c))
            return None if c == 0 else r + 4

    split = pd.DataFrame({"prompt_id": list(PROMPTS), "prompt": list(PROMPTS.values()),
                          "answer": ["46", "11", "6912", "15"]})
    verifier = Verifier(timeout=5, workers=1)
    try:
        out = scored_samples(str(tiny_model_dir), split, _params(), "last_number", verifier, log=lambda *_: None,
                             rule=Rule())
    finally:
        verifier.close()
    for pid, rows in out.groupby("prompt_id"):
        n = len(rows)
        assert n in (4, 8, 12) and rows["sample_idx"].tolist() == list(range(n))
        prefix_correct = [int(rows["correct"].head(r).sum()) for r in (4, 8) if r <= n]
        assert (n == 12) or prefix_correct[-1] == 0  # it stopped where the rule said
    assert {r for r, _ in Rule.calls} <= {4, 8}


def test_the_regimes_stage_labels_each_prompt_from_its_own_n_and_says_so(tmp_path, capsys):
    """An adaptive artifact: a prompt's n is its rows; p_base = c / n_i; one warning line."""
    from boundary.stages import regimes as stage

    rows = [("a", i, i < 8) for i in range(16)] + [("b", i, i < 3) for i in range(256)] \
        + [("c", i, False) for i in range(256)] + [("d", i, i < 40) for i in range(64)]
    pd.DataFrame(rows, columns=["prompt_id", "sample_idx", "correct"]).to_parquet(tmp_path / "cal.parquet")
    stage.main(["--calibration", str(tmp_path / "cal.parquet"), "--out", str(tmp_path / "regimes.parquet"),
                "--settings", '{"easy": 0.6, "boundary": 0.1, "coverage_k": 256, "coverage_min": 0.4}'])
    table = pd.read_parquet(tmp_path / "regimes.parquet").set_index("prompt_id")
    assert table["n"].to_dict() == {"a": 16, "b": 256, "c": 256, "d": 64}
    assert table["regime"].to_dict() == {"a": "Reachable", "b": "Boundary", "c": "OutOfReach", "d": "SolvedEasy"}
    assert "calibration n varies by prompt (16-256: adaptive or extended)" in capsys.readouterr().err


def test_replay_on_a_full_runs_own_draws(tmp_path, capsys, monkeypatch):
    """bench_adaptive_calibration --replay: an adaptive run whose rows are the full run's prefixes
    (a CPU's) agrees on every label, matches verdict for verdict, and keeps the rule's draws."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_adaptive_calibration.py"
    spec = importlib.util.spec_from_file_location("bench_adaptive_calibration", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    resolved = bench._settings(None, {})  # config/config.yaml's, as main() without --config
    # The script's own rule (_rule: from the resolved settings, designed), made once for this
    # test and both runs of main() below, which resolve the same settings: a design is ~10 s.
    rule = bench._rule(resolved)
    monkeypatch.setattr(bench, "_rule", lambda config: rule if config == resolved else pytest.fail(config))
    rng = np.random.default_rng(7)
    rows, kept = [], 0
    for i, p in enumerate([0.0, 0.004, 0.03, 0.09, 0.3, 0.7, 0.95, 1.0]):
        draws = (rng.random(rule.n) < p).astype(int)
        stop = rule.draws(draws)
        kept += stop
        for run, upto in (("full", rule.n), ("adaptive", stop)):
            rows += [("pool", run, f"q{i}", k, bool(draws[k])) for k in range(upto)]
    table = pd.DataFrame(rows, columns=["pool", "run", "prompt_id", "sample_idx", "correct"])
    table.to_parquet(tmp_path / "outcomes.parquet")
    bench.main(["--replay", str(tmp_path / "outcomes.parquet"), "--replicates", "5"])
    out = capsys.readouterr().out
    assert out.count("agreement: 100.00% of 8 prompt labels") == 2  # the replay and the "real" run
    assert f"samples: {kept:,} of {8 * rule.n:,}" in out
    assert f"same sample index, same verdict: 100.00% of {kept:,} pairs" in out
    table[~((table["run"] == "full") & (table["sample_idx"] == 0))].to_parquet(tmp_path / "short.parquet")
    with pytest.raises(SystemExit, match=f"short.parquet: pool pool: a full run's prompt without {rule.n} samples"):
        bench.main(["--replay", str(tmp_path / "short.parquet")])
