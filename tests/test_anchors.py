"""Anchor gradients against analytic KL gradients, by Monte Carlo on a small categorical.

pi = softmax(theta) over K outcomes, pi_base fixed. Each Monte Carlo sample gets its own copy
of theta, so autograd yields per-sample gradients: their mean is the estimator's expected
gradient (checked within 5 standard errors), compared with autograd on the exact KL.
"""

import pytest
import torch

from boundary.training.anchors import base_cross_entropy, per_token_kl, policy_kl, support_floor, token_mean

K, N = 6, 100_000


@pytest.fixture(scope="module")
def dists():
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(K, generator=gen, dtype=torch.float64)
    # A base that keeps mass where the policy has little: the regime an anchor exists for.
    base = torch.softmax(torch.randn(K, generator=gen, dtype=torch.float64), 0)
    return theta, base


def mc_gradient(theta, base, sample_from, loss_of):
    """Mean and standard error of the per-sample gradient of loss_of(logp_y, base_logp_y)."""
    gen = torch.Generator().manual_seed(1)
    probs = torch.softmax(theta, 0) if sample_from == "policy" else base
    y = torch.multinomial(probs, N, replacement=True, generator=gen)
    thetas = theta.detach().repeat(N, 1).requires_grad_()
    logp = torch.log_softmax(thetas, -1).gather(1, y[:, None])  # [N, 1]: one-token rollouts
    base_logp = base.log()[y][:, None]
    loss_of(logp, base_logp, torch.ones_like(logp)).sum().backward()
    grads = thetas.grad
    return grads.mean(0), grads.std(0) / N ** 0.5


def analytic(theta, base, direction):
    theta = theta.detach().clone().requires_grad_()
    logpi = torch.log_softmax(theta, 0)
    if direction == "reverse":  # KL(pi || pi_base)
        kl = (logpi.exp() * (logpi - base.log())).sum()
    else:  # forward KL(pi_base || pi)
        kl = (base * (base.log() - logpi)).sum()
    (grad,) = torch.autograd.grad(kl, theta)
    return grad


def assert_close(mean, se, target):
    assert torch.all((mean - target).abs() <= 5 * se + 1e-9), (mean, target, se)


def test_k1_has_zero_expected_gradient(dists):
    theta, base = dists
    mean, se = mc_gradient(theta, base, "policy", lambda lp, blp, m: policy_kl(lp, blp, m, "k1"))
    assert_close(mean, se, torch.zeros(K, dtype=torch.float64))
    # ...although the true reverse-KL gradient it is meant to follow is far from zero.
    assert analytic(theta, base, "reverse").abs().max() > 20 * se.max()


def test_k1_value_is_unbiased_for_the_kl(dists):
    theta, base = dists
    pi = torch.softmax(theta, 0)
    y = torch.multinomial(pi, N, replacement=True, generator=torch.Generator().manual_seed(2))
    value = per_token_kl(pi.log()[y], base.log()[y], "k1")
    kl = (pi * (pi.log() - base.log())).sum()
    assert abs(value.mean() - kl) < 5 * value.std() / N ** 0.5


def test_k2_matches_reverse_kl_gradient(dists):
    theta, base = dists
    mean, se = mc_gradient(theta, base, "policy", lambda lp, blp, m: policy_kl(lp, blp, m, "k2"))
    assert_close(mean, se, analytic(theta, base, "reverse"))


def test_k3_matches_forward_kl_gradient(dists):
    theta, base = dists
    mean, se = mc_gradient(theta, base, "policy", lambda lp, blp, m: policy_kl(lp, blp, m, "k3"))
    assert_close(mean, se, analytic(theta, base, "forward"))


def test_base_cross_entropy_matches_forward_kl_gradient(dists):
    theta, base = dists
    mean, se = mc_gradient(theta, base, "base", lambda lp, blp, m: base_cross_entropy(lp, m))
    assert_close(mean, se, analytic(theta, base, "forward"))


@pytest.mark.parametrize("floor", [1.0, 0.1])
def test_support_floor_matches_the_hinge_gradient(dists, floor):
    """Expected gradient on base samples = gradient of sum_y pi_base(y) relu(log min(pi_base(y),
    floor) - log pi(y)): the forward-KL pull, restricted to outcomes below their floor."""
    theta, base = dists
    mean, se = mc_gradient(theta, base, "base", lambda lp, blp, m: support_floor(lp, blp, m, floor))
    t = theta.detach().clone().requires_grad_()
    logpi = torch.log_softmax(t, 0)
    target = base.log().clamp(max=torch.tensor(floor, dtype=base.dtype).log())
    (grad,) = torch.autograd.grad((base * torch.relu(target - logpi)).sum(), t)
    assert_close(mean, se, grad)
    below = logpi.detach() < target
    assert below.any() and not below.all()  # the fixture exercises both sides of the hinge
    if floor == 1.0:  # every outcome below the base is pulled, none above it is pushed down
        assert not torch.allclose(grad, analytic(theta, base, "forward"))


def test_support_floor_is_zero_at_or_above_the_floor():
    logps = torch.log(torch.tensor([[0.5, 0.9], [0.01, 0.9]]))
    base_logps = torch.log(torch.tensor([[0.6, 0.95], [0.05, 0.9]]))
    mask = torch.ones_like(logps)
    # Row 0: both tokens above min(pi_base, 0.02) -> no loss; row 1: the first is 0.01 < 0.02.
    value = support_floor(logps, base_logps, mask, 0.02)
    assert value[0] == 0
    assert torch.isclose(value[1], 0.5 * torch.log(torch.tensor(0.02 / 0.01)))


def test_token_mean_ignores_padding():
    x = torch.tensor([[1.0, 3.0, 100.0], [2.0, 100.0, 100.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert token_mean(x, mask).tolist() == [2.0, 2.0]


def test_unknown_estimator():
    with pytest.raises(ValueError, match="k4"):
        per_token_kl(torch.zeros(1, 1), torch.zeros(1, 1), "k4")
