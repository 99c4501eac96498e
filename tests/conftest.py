"""Shared fixtures: a tiny random testbed model on disk and the CLI on PATH."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The `boundary` CLI lives beside this interpreter; subprocesses must find it.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A randomly initialised tiny Llama + char tokenizer, saved like a pretrained base."""
    from boundary.tasks.testbed import TinyModelConfig, build_model, build_tokenizer

    out = tmp_path_factory.mktemp("tiny_model")
    tokenizer = build_tokenizer()
    model = build_model(TinyModelConfig(hidden=32, layers=1, heads=2, intermediate=64), tokenizer)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
