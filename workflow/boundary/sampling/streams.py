"""Counter-based random streams: a completion's draws depend only on (seed, prompt, sample index).

Each row carries a 64-bit key, a hash of (seed, its prompt's token ids, its sample index). The
uniform a row uses for its t-th token, draw attempt a, lane l is SplitMix64 at position
(t * STREAMS + 2a + l) of the stream seeded by its key: a pure function of those numbers, so
the same config draws the same samples whatever the batch size, the order rows are refilled
in, the card, or who shares it. No generator state is carried; a step computes [rows] hashes
in a few integer kernels (64-bit multiply wraps the same way on CPU and CUDA), and the
uniforms have 53 bits, exact in float64 on every device.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

STREAMS = 64  # positions a token index owns: 2 lanes for each of up to 32 draw attempts
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)  # SplitMix64's increment and multipliers, as int64
_M1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_M2 = 0x94D049BB133111EB - (1 << 64)


def prompt_digest(ids) -> bytes:
    return hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=16).digest()


def row_keys(seed: int, prompts: list[list[int]], samples: list[int] | None = None) -> torch.Tensor:
    """[rows] int64 keys. `samples[i]` is row i's sample index; by default the number of earlier
    rows with the same prompt (a prompt repeated n times gets sample indices 0..n-1)."""
    digests: dict[tuple, bytes] = {}
    seen: dict[bytes, int] = {}
    keys = []
    for i, p in enumerate(prompts):
        d = digests.get(tuple(p)) or digests.setdefault(tuple(p), prompt_digest(p))
        if samples is None:
            index = seen[d] = seen.get(d, -1) + 1
        else:
            index = samples[i]
        blob = d + int(seed).to_bytes(16, "little", signed=True) + int(index).to_bytes(8, "little", signed=True)
        keys.append(int.from_bytes(hashlib.blake2b(blob, digest_size=8).digest(), "little", signed=True))
    return torch.tensor(keys, dtype=torch.int64)


def _srl(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def _mix(z: torch.Tensor) -> torch.Tensor:
    z = (z ^ _srl(z, 30)) * _M1
    z = (z ^ _srl(z, 27)) * _M2
    return z ^ _srl(z, 31)


def uniforms(keys: torch.Tensor, counter: torch.Tensor, attempt: int, lane: int) -> torch.Tensor:
    """[rows] float64 uniforms in [0, 1): row i's at token index counter[i], draw `attempt`, `lane`."""
    position = counter * STREAMS + (2 * attempt + lane + 1)
    return _srl(_mix(keys + position * _GOLDEN), 11).double() * 2.0**-53
