"""The HTML page of a diagnosis: self-contained (figures as data URIs, nothing fetched), the
worst lost prompts with their text and samples, and rendered in a real headless Chromium.

Chromium comes from Debian (`apt-get install chromium`); workflow/scripts/test.sh installs it
when it can (root with apt-get). Without it the browser test skips and says why."""

import base64
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from boundary.analysis import diagnose as dg

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A diagnosis from plain sample files: base, two seeds of a method that loses rare prompts."""
    tmp = tmp_path_factory.mktemp("page")
    rng = np.random.default_rng(0)
    P, n = 30, 8
    p = rng.beta(0.5, 1.0, P)
    p[:6] = 0.3  # solved by the base, lost after training

    def write(name, rate, seed):
        rows = []
        for i in range(P):
            for j in range(n):
                ok = bool(rng.random() < rate[i])
                rows.append({"prompt_id": f"q{i}", "problem": f"Problem {i}: what is {i} <b>x</b> 2?",
                             "completion": f"{name} seed {seed} sample {j}: \\boxed{{{2 * i if ok else i}}}",
                             "correct": ok})
        path = tmp / f"{name}{seed}.jsonl"
        pd.DataFrame(rows).to_json(path, orient="records", lines=True)
        return str(path)

    trained = np.where(np.arange(P) < 6, 0.0, np.minimum(1, p * 1.5))
    args = ["--base", write("base", p, 0), "--calibration", write("cal", p, 0)]
    for s in (0, 1):
        args += ["--trained", f"grpo:{s}=" + write("grpo", trained, s)]
    out = tmp / "out"
    dg.main(args + ["--ks", "1,2,8", "--coverage-k", "8", "--resamples", "200", "--out", str(out)])
    return out / "report.html"


def test_page_is_self_contained_with_every_figure(page):
    text = page.read_text()
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:|//|file:)", text)
    assert "http://" not in text and "https://" not in text
    images = re.findall(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) >= 7
    for b64 in images:
        assert base64.b64decode(b64)[:8] == b"\x89PNG\r\n\x1a\n"
    for caption in ("pass@k curves", "Δpass@k at every k", "regimes and transition cells", "pass@k per regime",
                    "transitions"):
        assert caption in text
    assert f'data-figures="{len(images)}"' in text


def test_page_lists_worst_lost_prompts_with_text_and_samples(page):
    text = page.read_text()
    section = text.split("Worst lost prompts", 1)[1]
    assert "Problem 0: what is 0 &lt;b&gt;x&lt;/b&gt; 2?" in section or "Problem 1: what is" in section  # escaped
    assert "<b>x</b>" not in section
    assert "Base, verified correct" in section and "base seed 0 sample" in section
    assert "none correct" in section and "grpo seed" in section
    assert "k*" in text and "Lost, significant" in text


def browser():
    return next((b for b in map(shutil.which, BROWSERS) if b), None)


@pytest.mark.skipif(browser() is None, reason="no Chromium on this machine: apt-get install chromium "
                                              "(workflow/scripts/test.sh does it when run as root)")
def test_page_renders_in_headless_chromium(page, tmp_path):
    flags = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,4000"]
    dom = subprocess.run(flags + ["--virtual-time-budget=5000", "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    expected = int(re.search(r'data-figures="(\d+)"', page.read_text())[1])
    rendered = re.search(r'data-figures-rendered="(\d+)"', dom.stdout)
    assert rendered is not None, "the page's load handler did not run"
    assert int(rendered[1]) == expected >= 7  # every embedded figure decoded with a width
    shot = tmp_path / "page.png"
    run = subprocess.run(flags + [f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape[0] >= 1000 and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # drawn, not blank


def test_headline_gives_lost_prompts_as_totals_with_each_seed(page):
    """Lost counts are totals over seeds with each seed's count, never a rounded mean (issue 41)."""
    from boundary.analysis.tables import counts_text

    text = page.read_text()
    head = text.split("Lost: total (per seed)", 1)[1].split("</table>", 1)[0]
    metrics = pd.read_csv(page.parent / "metrics.csv")
    lost = metrics[(metrics["method"] == "grpo") & (metrics["metric"] == "lost") & (metrics["regime"] == "all")
                   & metrics["k"].isna()].sort_values("seed")["value"]
    assert len(lost) == 2
    assert f"<td>{counts_text(lost.to_numpy(float))}</td>" in head
