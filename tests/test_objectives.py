"""The field's methods (objectives.py, the DPH-RL anchors, the `solved` mask): each defining
computation against a direct implementation on a small example, then each as a config of the
trainer on a tiny model (what reaches the loss)."""

import itertools

import numpy as np
import pandas as pd
import pytest
import torch

from boundary.core.errors import BoundaryError
from boundary.training import objectives as obj
from boundary.training.anchors import base_forward_kl, base_js
from boundary.training.gate import build_mask

# --- advantages and rewards ------------------------------------------------------------------


def brute_force_passk(r, k):
    """Pass@k Training's advantage by enumeration: the group reward of a k-subset is its max;
    R and s are the mean and SD of that reward over all k-subsets, and a rollout's advantage is
    the mean over the subsets that contain it of (subset reward - R) / s."""
    subsets = list(itertools.combinations(range(len(r)), k))
    reward = np.array([max(r[j] for j in s) for s in subsets], float)
    mean, sd = reward.mean(), reward.std()
    return np.array([np.mean([(reward[t] - mean) / (sd + 1e-6) for t, s in enumerate(subsets) if i in s])
                     for i in range(len(r))])


@pytest.mark.parametrize("G,k", [(4, 1), (4, 2), (6, 3), (8, 4), (8, 8)])
def test_passk_advantage_is_brute_force_enumeration(G, k):
    rng = np.random.default_rng(G * 10 + k)
    groups = [np.zeros(G), np.ones(G)] + [(rng.random(G) < p).astype(float) for p in (0.1, 0.3, 0.5, 0.8)]
    rewards = torch.tensor(np.concatenate(groups), dtype=torch.float32)
    ours = obj.passk_advantages(rewards, G, k).numpy()
    direct = np.concatenate([brute_force_passk(g, k) for g in groups])
    assert np.allclose(ours, direct, atol=1e-4)
    if k == 1:  # pass@1: GRPO's advantage with the population SD
        pop = [(g - g.mean()) / (g.std() + 1e-6) for g in groups]
        assert np.allclose(ours, np.concatenate(pop), atol=1e-4)


def test_passk_refuses_k_above_the_group():
    with pytest.raises(BoundaryError, match="passk_k"):
        obj.passk_advantages(torch.zeros(8), 4, 5)
    with pytest.raises(BoundaryError, match="groups of 4"):
        obj.passk_advantages(torch.zeros(6), 4, 2)


def test_group_advantages_are_trls_formula():
    rewards = torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 0, 0.75, 1, 0.5, 0])
    r = rewards.numpy().reshape(-1, 4)
    direct = (r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-4)
    assert np.allclose(obj.group_advantages(rewards, 4).numpy(), direct.reshape(-1), atol=1e-6)
    assert np.allclose(obj.group_advantages(rewards, 4, scale=False).numpy(),
                       (r - r.mean(1, keepdims=True)).reshape(-1))


def authors_psr_nsr(scores, mode, weight):
    """The authors' compute_psr_nsr_outcome_advantage for outcome rewards (gamma = 1)."""
    returns = scores.copy()
    if mode == "positive":
        return returns
    if mode == "negative":
        return returns - 1
    returns[scores == 1] *= weight
    returns[scores == 0] -= 1
    return returns


def test_reinforce_advantages_are_the_authors_weighted_negative_and_positive_modes():
    scores = np.array([1.0, 0, 0, 1, 1, 0])
    assert np.array_equal(obj.reinforce_advantages(torch.tensor(scores), 0.1, 1.0).numpy(),
                          authors_psr_nsr(scores, "weighted", 0.1).astype(np.float32))
    assert np.array_equal(obj.reinforce_advantages(torch.tensor(scores), 0.0, 1.0).numpy(),
                          authors_psr_nsr(scores, "negative", 0.0))
    # PSR: the positive term alone, +1 for a correct rollout and nothing for a wrong one
    psr = obj.reinforce_advantages(torch.tensor(scores), 1.0, 0.0)
    assert np.array_equal(psr.numpy(), authors_psr_nsr(scores, "positive", 1.0))
    assert psr.tolist() == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]


def test_unlikeliness_reward_ranks_within_each_group():
    rewards = torch.tensor([1.0, 1, 0, 1, 0, 1, 1, 1])
    logps = torch.tensor([-0.5, -3.0, -0.1, -1.0, -2.0, -0.2, -4.0, -1.0 + 1e-3])
    ours = obj.unlikeliness_rewards(rewards, logps, 4, 0.25).numpy()
    direct = []
    for g in range(2):
        r, lp = rewards[4 * g:4 * g + 4].numpy(), logps[4 * g:4 * g + 4].numpy()
        order = sorted(range(4), key=lambda i: lp[i])  # least likely first: rank 0
        rank = {i: pos for pos, i in enumerate(order)}
        direct += [r[i] * (1 - 0.25 * rank[i] / 4) for i in range(4)]
    assert np.allclose(ours, direct)
    assert ours[1] == 1.0 and ours[0] < ours[3] < ours[1]  # the rarest correct rollout keeps its reward


def test_sequence_logps_are_token_means():
    logps = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -0.5, -0.5]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert torch.allclose(obj.sequence_logps(logps, mask), torch.tensor([-1.5, -0.5]))


# --- covariance token selection --------------------------------------------------------------

@pytest.fixture
def batch():
    gen = torch.Generator().manual_seed(0)
    logps = -3 * torch.rand(6, 5, generator=gen)
    adv = torch.tensor([1.5, -0.5, 2.0, -1.0, 0.3, -2.0])
    mask = torch.ones(6, 5, dtype=torch.long)
    mask[1, 3:] = 0
    mask[4, 1:] = 0
    return logps, adv, mask


def numpy_cov(logps, adv, mask):
    lp, m = logps.numpy(), mask.numpy().astype(bool)
    a = np.broadcast_to(adv.numpy()[:, None], lp.shape)
    return (a - a[m].mean()) * (lp - lp[m].mean()), m


def test_covariance_is_numpys(batch):
    cov, m = numpy_cov(*batch)
    assert np.allclose(obj.token_covariance(*batch).numpy()[m], cov[m], atol=1e-6)


@pytest.mark.parametrize("fraction", [0.002, 0.1, 0.5])
def test_kl_cov_selects_the_top_covariance_tokens(batch, fraction):
    cov, m = numpy_cov(*batch)
    n = max(1, int(m.sum() * fraction))
    threshold = np.sort(cov[m])[::-1][n - 1]
    chosen = obj.kl_cov_tokens(*batch, fraction).numpy()
    assert chosen.sum() == n and not chosen[~m].any()
    assert np.array_equal(chosen, m & (cov >= threshold))


def test_clip_cov_stops_random_tokens_inside_the_band(batch):
    cov, m = numpy_cov(*batch)
    lb, ub = 0.05, 1.5
    band = m & (cov > lb) & (cov < ub)
    assert 1 < band.sum() < m.sum()
    one = obj.clip_cov_tokens(*batch, 2e-4, (lb, ub), torch.Generator().manual_seed(1)).numpy()
    assert one.sum() == 1 and (one <= band).all()  # 2e-4 of 22 tokens: the floor of one token
    every = obj.clip_cov_tokens(*batch, 1.0, (lb, ub), torch.Generator().manual_seed(1)).numpy()
    assert np.array_equal(every, band)
    none = obj.clip_cov_tokens(*batch, 1.0, (50.0, 60.0)).numpy()
    assert not none.any()


def test_kl_cov_penalty_acts_only_off_policy(batch):
    logps, _, mask = batch
    selected = obj.kl_cov_tokens(*batch, 0.2)
    on = logps.clone().requires_grad_(True)
    obj.kl_cov_penalty(on, on.detach(), selected, 1.0).sum().backward()
    assert on.grad.abs().sum() == 0  # on-policy: value 0 and gradient 0
    off = logps.clone().requires_grad_(True)
    old = logps - 0.1 * torch.sign(torch.randn(logps.shape, generator=torch.Generator().manual_seed(2)))
    obj.kl_cov_penalty(off, old, selected, 2.0).sum().backward()
    assert torch.equal(off.grad, 2.0 * torch.sign(logps - old) * selected)


# --- DPH-RL anchors ----------------------------------------------------------------------------

def test_dph_anchor_values_are_the_authors_formulas():
    logps = torch.tensor([[-0.2, -1.0, -3.0]])
    base = torch.tensor([[-0.5, -0.9, -0.4]])
    mask = torch.tensor([[1, 1, 0]])
    u = np.exp(logps.numpy() - base.numpy())[0, :2]
    fkl = np.clip(u - np.log(u) - 1, -10, 10).mean()
    js = (u * np.log(u) - (u + 1) * np.log((u + 1) / 2)).mean()
    assert np.isclose(base_forward_kl(logps, base, mask).item(), fkl, atol=1e-6)
    assert np.isclose(base_js(logps, base, mask).item(), js, atol=1e-6)


def test_dph_anchors_expectations_over_base_samples_are_forward_kl_and_twice_js():
    """One token: the base-weighted sum of the per-token terms is the divergence itself."""
    p = np.array([0.5, 0.3, 0.15, 0.05])   # base
    q = np.array([0.7, 0.25, 0.049, 0.001])  # policy
    logps = torch.tensor(np.log(q))[:, None].float()
    base = torch.tensor(np.log(p))[:, None].float()
    mask = torch.ones(4, 1)
    fkl = (torch.tensor(p) * base_forward_kl(logps, base, mask).double()).sum().item()
    js = (torch.tensor(p) * base_js(logps, base, mask).double()).sum().item()
    m = (p + q) / 2
    assert np.isclose(fkl, np.sum(p * np.log(p / q)), atol=1e-5)
    assert np.isclose(js, np.sum(p * np.log(p / m)) + np.sum(q * np.log(q / m)), atol=1e-5)


# --- the solved mask: the gate turned around ----------------------------------------------------

def test_solved_mask_is_the_gate_turned_around():
    rng = np.random.default_rng(0)
    ids = [f"p{i}" for i in range(40)]
    draws = pd.DataFrame([{"prompt_id": p, "epoch": e, "draw_idx": d, "correct": bool(rng.random() < 0.3)}
                          for p in ids for e in range(2) for d in range(8)])
    gate = build_mask("gate", {"G0": 8, "tau": 0.1, "epochs": 2}, draws, ids)
    solved = build_mask("solved", {"G0": 8, "tau": 0.1, "epochs": 2}, draws, ids)
    assert np.array_equal(solved["weight"], 1 - gate["weight"])  # zero-success prompts are the sharpened ones
    assert ((solved["action"] == "sharpen") == (solved["successes"] == 0)).all()
    dph = build_mask("solved", {"G0": 4, "tau": 1.0, "epochs": 2}, draws, ids)
    first4 = draws[draws["draw_idx"] < 4].groupby(["prompt_id", "epoch"])["correct"].all()
    assert np.array_equal(dph.set_index(["prompt_id", "epoch"])["weight"].astype(bool),
                          first4.reindex(dph.set_index(["prompt_id", "epoch"]).index))


# --- each method as a config of the trainer (tiny model) ---------------------------------------

from test_train import G, first_batch, make_trainer, model_dir, perturb, split  # noqa: E402,F401


def policy_logps(trainer, out):
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn,
                                                                 out["completion_ids"].size(1))
    return logps


@pytest.mark.parametrize("method", [{"advantage": "passk", "passk_k": 2},
                                    {"advantage": "reinforce", "positive_weight": 0.1},
                                    {"advantage": "reinforce", "positive_weight": 1.0, "negative_weight": 0.0},
                                    {"unlikeliness": 0.25}])
def test_method_advantages_reach_the_batch(model_dir, split, tmp_path, method):
    trainer = make_trainer(model_dir, split, tmp_path, **method)
    torch.manual_seed(0)
    out = trainer._generate_and_score_completions(first_batch(trainer, split))
    rewards = out["reward"]
    if "advantage" in method and method["advantage"] == "passk":
        want = obj.passk_advantages(rewards, G, 2)
    elif "advantage" in method:
        want = obj.reinforce_advantages(rewards, method["positive_weight"], method.get("negative_weight", 1.0))
    else:
        seq = obj.sequence_logps(policy_logps(trainer, out), out["completion_mask"])
        want = obj.group_advantages(obj.unlikeliness_rewards(rewards, seq, G, 0.25), G)
    assert torch.allclose(out["advantages"], want, atol=1e-5)


def test_on_policy_psr_s_loss_is_minus_its_mean_reward_and_grpo_s_is_zero(model_dir, split, tmp_path, monkeypatch):
    """PSR's advantage is the reward itself (+1 correct, 0 wrong) and on policy the ratio is 1,
    so its loss is minus the batch's mean reward; GRPO's centred advantages give 0 (the log's
    `loss` and `reward` of a PSR and a GRPO run, step by step)."""
    import test_train

    # Every other completion of a group correct: advantages neither all zero nor all one.
    monkeypatch.setattr(test_train, "digits_reward", lambda prompts, completions, **kw:
                        [float(i % 2) for i in range(len(completions))])
    for method, want in [({"advantage": "reinforce", "positive_weight": 1.0, "negative_weight": 0.0}, -0.5),
                         ({}, 0.0)]:
        trainer = make_trainer(model_dir, split, tmp_path, **method)
        out = trainer._generate_and_score_completions(first_batch(trainer, split))
        assert out["reward"].mean().item() == 0.5
        assert trainer._compute_loss(trainer.model, out).item() == pytest.approx(want, abs=1e-5)


def test_clip_cov_stops_its_tokens_in_trls_loss(model_dir, split, tmp_path):
    from trl import GRPOTrainer

    trainer = make_trainer(model_dir, split, tmp_path, cov_select="clip", cov_fraction=0.05,
                           cov_bounds=[-10.0, 10.0])
    out = trainer._generate_and_score_completions(first_batch(trainer, split))
    mask = out["completion_mask"]
    adv = obj.group_advantages(out["reward"], G)
    stopped = obj.clip_cov_tokens(policy_logps(trainer, out), adv, mask, 0.05, (-10.0, 10.0),
                                  torch.Generator().manual_seed(0))
    assert stopped.any() and torch.equal(out["advantages"], adv[:, None] * ~stopped)
    perturb(trainer.model)
    ours = trainer._compute_loss(trainer.model, out)
    assert torch.allclose(ours, GRPOTrainer._compute_loss(trainer, trainer.model, out))


def test_on_policy_kl_cov_and_clip_higher_train_exactly_as_grpo(model_dir, split, tmp_path, monkeypatch):
    """One optimizer step per generation batch: KL-Cov's |log pi - log pi_old| and the PPO clip
    never act, so two steps give GRPO's weights to the bit (docs/reference/methods.md)."""
    import test_train

    # A reward the random tiny model earns sometimes, so GRPO's advantages are not all zero.
    monkeypatch.setattr(test_train, "digits_reward", lambda prompts, completions, **kw:
                        [float(c[:1] in "0123456789") for c in completions])
    weights = {}
    for name, method in [("grpo", {}), ("clip_higher", {"epsilon_high": 0.28}),
                         ("kl_cov", {"cov_select": "kl", "cov_fraction": 0.1})]:
        trainer = make_trainer(model_dir, split, tmp_path / name, steps=2, save_steps=100, checkpoints=[], **method)
        trainer.train()
        weights[name] = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    assert not torch.equal(weights["grpo"], torch.cat([p.flatten() for p in
                                                       make_trainer(model_dir, split, tmp_path).model.parameters()]))
    assert torch.equal(weights["clip_higher"], weights["grpo"]) and torch.equal(weights["kl_cov"], weights["grpo"])


@pytest.mark.parametrize("anchor", ["forward_kl", "js"])
def test_dph_anchored_loss_is_the_divergence_on_base_rollouts(model_dir, split, tmp_path, anchor):
    trainer = make_trainer(model_dir, split, tmp_path, np.ones((2, len(split))), mask="m", anchor=anchor, beta_a=2.0)
    out = trainer._generate_and_score_completions(first_batch(trainer, split))
    assert out["from_base"].all() and out["base_scored"].all()
    perturb(trainer.model)
    loss = trainer._compute_loss(trainer.model, out)
    divergence = base_forward_kl if anchor == "forward_kl" else base_js
    a = divergence(policy_logps(trainer, out), out["base_per_token_logps"], out["completion_mask"])
    assert a.abs().sum() > 0 and torch.allclose(loss, 2.0 * a.mean(), atol=1e-5)


def test_every_method_is_a_trainer_config(tmp_path):
    """tests/configs/methods.yaml: each method's settings (as the pipeline passes them) make a
    trainer config with the intended objective."""
    from conftest import ROOT

    from boundary.core.config import load_config
    from boundary.core.settings import method_settings, resolve
    from boundary.training.trainer_config import make_config

    config = load_config(ROOT / "tests" / "configs" / "methods.yaml")
    cfgs = {m: make_config(resolve("train", {**config["train"], "refresh_steps": 100, **method_settings(spec)}), 0, str(tmp_path))
            for m, spec in config["methods"].items()}
    assert (cfgs["passk"].advantage, cfgs["passk"].passk_k) == ("passk", 4)
    assert (cfgs["w_reinforce"].positive_weight, cfgs["nsr"].positive_weight) == (0.1, 0.0)
    assert cfgs["clip_cov"].cov_bounds == (1.0, 5.0) and cfgs["kl_cov"].cov_select == "kl"
    assert cfgs["clip_higher"].epsilon_high == 0.28 and cfgs["grpo"].epsilon_high is None  # TRL: = epsilon
    assert cfgs["unlikeliness"].unlikeliness == 0.25 and not cfgs["grpo"].regrouped
    assert {cfgs["dph_forward_kl"].anchor, cfgs["dph_js"].anchor} == {"forward_kl", "js"}
    assert config["masks"]["solved"]["kind"] == "solved" and cfgs["zero_success"].masked_action == "drop"
    assert cfgs["w_reinforce"].negative_weight == cfgs["nsr"].negative_weight == 1.0  # the schema's default


def test_psr_is_the_positive_term_alone(tmp_path):
    """PSR, the arithmetic config's positive control: W-REINFORCE's weighting without its negative
    term; both weights 0 would train nothing and is refused in one line."""
    from conftest import ROOT

    from boundary.core.config import load_config
    from boundary.core.settings import method_settings, resolve
    from boundary.training.trainer_config import make_config

    config = load_config(ROOT / "tests" / "configs" / "smollm2_arith_smoke.yaml")
    settings = {**config["train"], "refresh_steps": 100, **method_settings(config["methods"]["psr"])}
    psr = make_config(resolve("train", settings), 0, str(tmp_path))
    assert (psr.advantage, psr.positive_weight, psr.negative_weight) == ("reinforce", 1.0, 0.0) and psr.regrouped
    with pytest.raises(BoundaryError, match="positive_weight, negative_weight: both 0"):
        make_config(resolve("train", {**settings, "positive_weight": 0.0}), 0, str(tmp_path))
