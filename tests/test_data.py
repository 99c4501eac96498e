"""Splits from data files: schema defaults, gold normalisation, the chat template with a
system prompt, and one line naming the file for every bad data file."""

import json
import subprocess

import pytest

from boundary.core.config import dumps
from boundary.stages.data import build_splits


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _settings(tmp_path, rows, **spec):
    path = _write(tmp_path / "d.jsonl", rows)
    ds = {"path": path, "problem_field": "question", "answer_field": "answer", "id_field": None,
          "answer_format": "gsm8k", "limit": None, "source": None, "extractor": None, **spec}
    return {"testbed": None, "prompt": {"template": "Q: {problem}", "chat": False, "system": None},
            "data": {"train": ds, "diagnostic": ds, "benchmarks": {"gsm8k": ds}}}


GOOD = [{"question": "1+1?", "answer": "so #### 2"}, {"question": "2+2?", "answer": "x #### 1,004"}]


def test_gsm8k_golds_and_ids(tmp_path):
    splits = build_splits(_settings(tmp_path, GOOD))
    train = splits["train"]
    assert train["answer"].tolist() == ["2", "1004"]
    assert train["prompt_id"].tolist() == ["train-00000", "train-00001"]
    assert splits["bench_gsm8k"]["prompt"].tolist() == ["Q: 1+1?", "Q: 2+2?"]


def test_chat_template_with_a_system_prompt(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
                               "{% if add_generation_prompt %}<assistant>{% endif %}")
    tokenizer.save_pretrained(tmp_path / "model")
    settings = _settings(tmp_path, GOOD)
    settings["prompt"].update(chat=True, system="Be brief.")
    prompts = build_splits(settings, str(tmp_path / "model"))["train"]["prompt"].tolist()
    assert prompts[0] == "<system>Be brief.<user>Q: 1+1?<assistant>"
    settings["prompt"]["system"] = None
    assert build_splits(settings, str(tmp_path / "model"))["train"]["prompt"][0] == "<user>Q: 1+1?<assistant>"


@pytest.mark.parametrize("rows, spec, message", [
    ([{"question": "a"}], {}, "missing column(s) answer"),
    (GOOD + [{"question": "b", "answer": "  "}], {"answer_format": "plain"},
     "empty gold answer in field 'answer' (row 2)"),
    ([{"question": "a", "answer": "7"}], {}, "answer_format gsm8k but the answer in row 0 has no '####'"),
    ([dict(r, id="same") for r in GOOD], {"id_field": "id"}, "duplicate prompt id 'same' in field 'id'"),
    ([], {}, "no rows"),
])
def test_a_bad_data_file_is_one_line_naming_it(tmp_path, rows, spec, message):
    settings = _settings(tmp_path, rows, **spec)
    run = subprocess.run(["boundary", "data", "--settings", dumps(settings), "--out-dir", str(tmp_path / "splits")],
                         capture_output=True, text=True)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [f"boundary data: error: {tmp_path / 'd.jsonl'}: {message}"]
    assert not (tmp_path / "splits").exists()
