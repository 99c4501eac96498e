"""benchmarks/bench_decode_precision.py on a CPU: its emulation of the sampler's "matmul" decode
arithmetic is attention (equal to sdpa in float32, causal, grouped heads), and its figures are
what it says (zero KL for the reference, KL >= 0 and finite for the bf16 variants)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_decode_precision

    return bench_decode_precision


def test_the_emulated_decode_arithmetic_is_causal_grouped_attention(bench):
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(0)
    query, key, value = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, 2
    ours, _ = bench.bf16_scores_attention(module, query, key, value, None, scaling=8 ** -0.5)
    theirs, _ = sdpa_attention_forward(module, query, key, value, None, scaling=8 ** -0.5, is_causal=True)
    assert ours.shape == theirs.shape == (2, 5, 4, 8)
    assert torch.allclose(ours, theirs, atol=1e-5)
    # a later key never reaches an earlier query
    key2, value2 = key.clone(), value.clone()
    key2[:, :, -1] += 5.0
    value2[:, :, -1] += 5.0
    again, _ = bench.bf16_scores_attention(module, query, key2, value2, None, scaling=8 ** -0.5)
    # equal up to rounding (a BLAS may tile the product differently), far from the +5 shift's effect
    assert torch.allclose(again[:, :-1], ours[:, :-1], atol=1e-6) and not torch.allclose(again[:, -1], ours[:, -1])


def test_the_figures_on_a_tiny_model(bench, tiny_model_dir, tmp_path, capsys):
    split = tmp_path / "split.parquet"
    pd.DataFrame({"prompt_id": ["a", "b"], "prompt": ["12+34=", "5+6="]}).to_parquet(split)
    out = tmp_path / "figures.csv"
    bench.main(["--model", str(tiny_model_dir), "--split", str(split), "--sequences", "2", "--max-tokens", "6",
                "--out", str(out)])
    table = pd.read_csv(out)
    assert sorted(table["variant"].unique()) == sorted(bench.VARIANTS)
    assert (table.loc[table["variant"] == "fp32", "kl"].abs() < 1e-9).all()
    others = table[table["variant"] != "fp32"]
    assert (others["kl"] >= -1e-6).all() and others[["kl", "entropy", "token_logp"]].notna().all().all()
    assert "entropy - fp32" in capsys.readouterr().out
