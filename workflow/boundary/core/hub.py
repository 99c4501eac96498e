"""The Hugging Face hub: whether this process may fetch from it, and the line that says why a
hub id or dataset was not fetched and what to set.

Offline is the user's choice: HF_HUB_OFFLINE=1 (with TRANSFORMERS_OFFLINE=1 and
HF_DATASETS_OFFLINE=1) keeps every download out, and then a hub id fails however good the
network is; the error names the switch, not the network.
"""

from __future__ import annotations

import os

OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


def offline_switches() -> list[str]:
    """The switches set on, as `NAME=value` (huggingface_hub's reading: 1, on, yes, true)."""
    return [f"{name}={os.environ[name]}" for name in OFFLINE_SWITCHES
            if os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}]


def why_not_fetched() -> str:
    """Why a download from the hub failed, as the end of a one-line error."""
    switches = offline_switches()
    if switches:
        return (f"offline mode is on ({', '.join(switches)}): unset "
                f"{' and '.join(s.split('=')[0] for s in switches)} to download from the hub")
    return ("the hub did not answer or has no such repository (check the network and the name; "
            "a gated or private one needs `hf auth login`)")
