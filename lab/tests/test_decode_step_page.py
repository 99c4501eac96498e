"""The decode-step page's tables, rebuilt from the run's own result files (consoles/)."""

from __future__ import annotations

import json
import re
from pathlib import Path

STUDY = Path(__file__).resolve().parents[1] / "studies" / "2026-11-29-decode-step-h200"
ROWS = {("1", "f"): "call1_row_f", ("1", "l"): "call1_row_l", ("1", "o"): "call1_row_o",
        ("2", "s"): "call2_row_s", ("2", "c"): "call2_row_c", ("3", "o"): "call3_row_o"}


def page_rows() -> dict:
    rows = {}
    for line in (STUDY / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[0] in "123" and cells[0]:
            rows[(cells[0], cells[1])] = cells
    return rows


def test_the_step_table_is_the_result_files():
    rows = page_rows()
    assert set(rows) == set(ROWS)
    for key, name in ROWS.items():
        r = json.loads((STUDY / "consoles" / f"{name}.json").read_text())
        cells = rows[key]
        generation = r["engine_s"] + r["logprobs_s"] + r["sleep_wake_s"] + r["generate_s"]
        reads = "0" if r["logprobs_s"] == 0 else f"{r['logprobs_s']:.2f}"
        sleep = "0" if r["sleep_wake_s"] == 0 else f"{r['sleep_wake_s']:.2f}"
        assert cells[2] == ("LoRA" if r["lora"] else "full"), key
        assert cells[4:] == [f"{r['engine_s']:.2f}", reads, sleep, f"{1000 * generation / 1024:.1f}",
                             f"{r['step_s']:.2f}"], key


def test_the_engine_alone_table_is_its_console():
    console = (STUDY / "consoles" / "call3_engine_alone.txt").read_text()
    page = (STUDY / "README.md").read_text()
    for label, seconds, ms in re.findall(r"^(.+?): ([\d.]+) s a call, ([\d.]+) ms a decoding step", console, re.M):
        name = {"TRL's request (logprobs=0)": "TRL's request (each token's log-prob)"}.get(label, label)
        assert f"| {name} | {seconds} | {ms} |" in page, label
