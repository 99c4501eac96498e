import numpy as np
import pytest

from boundary.core.errors import BoundaryError
from boundary.tasks.testbed import METHODS, TestbedTask, answer_of, build_tokenizer, completion_of, make_prompts


def test_cell_priors_are_distributions_with_one_dominant_mode():
    priors = TestbedTask().cell_priors()
    assert priors.shape == (10, len(METHODS))
    np.testing.assert_allclose(priors.sum(1), 1.0)
    assert (priors.max(1) >= 0.6).all()


def test_w_star_is_the_prior_mass_of_methods_giving_gold():
    task = TestbedTask()
    priors = task.cell_priors()
    split = make_prompts(task, {"diagnostic": 300})["diagnostic"]
    for row in split.itertuples():
        digits = tuple(int(ch) for ch in row.problem if ch.isdigit())
        expect = sum(priors[row.cell, m] for m, name in enumerate(METHODS)
                     if answer_of(digits, name) == row.answer)
        assert row.w_star == pytest.approx(expect)
        assert answer_of(digits, row.key) == row.answer


def test_splits_are_disjoint_and_span_every_regime():
    splits = make_prompts(TestbedTask(), {"train": 800, "diagnostic": 600, "testbed": 400})
    ids = [set(df.prompt_id) for df in splits.values()]
    assert sum(map(len, ids)) == len(set().union(*ids)) == 1800
    w = splits["diagnostic"]["w_star"].to_numpy()
    cover = 1 - (1 - w) ** 256
    regimes = {"easy": w > 0.6, "reachable": (w >= 0.1) & (w <= 0.6),
               "boundary": (w < 0.1) & (cover > 0.4), "out_of_reach": cover <= 0.4}
    for name, member in regimes.items():
        assert member.mean() > 0.05, name


def test_bad_task_design_is_rejected():
    with pytest.raises(BoundaryError, match="key_rank_probs"):
        TestbedTask(key_rank_probs=(0.5, 0.5, 0.5, 0.0, 0.0, 0.0))


def test_tokenizer_round_trips_character_by_character():
    tok = build_tokenizer()
    text = "37+52=" + completion_of((3, 7, 5, 2), "D")
    ids = tok(text + "<eos>", add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text) + 1 and ids[-1] == tok.eos_token_id
    assert tok.decode(ids, skip_special_tokens=True) == text
