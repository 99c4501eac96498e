"""Splits from data files: schema defaults, gold normalisation, the chat template with a
system prompt, and one line naming the file for every bad data file."""

import json

import pytest

from boundary.core.errors import BoundaryError
from boundary.core.settings import text as dumps
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
    (GOOD + [{"question": "b", "answer": "  "}], {"answer_format": "plain"}, "row 3: field 'answer' is empty"),
    ([{"question": "a", "answer": "7"}], {}, "row 1: answer_format gsm8k, but field 'answer' has no '####'"),
    ([dict(r, id="same") for r in GOOD], {"id_field": "id"}, "duplicate prompt id 'same' in field 'id'"),
    ([], {}, "no rows"),
])
def test_a_bad_data_file_is_one_line_naming_it(tmp_path, rows, spec, message, boundary_cli):
    settings = _settings(tmp_path, rows, **spec)
    code, _, err = boundary_cli(["data", "--settings", dumps(settings), "--out", tmp_path / "splits"])
    assert code == 1
    assert err.strip().splitlines() == [f"boundary data: error: {tmp_path / 'd.jsonl'}: {message}"]
    assert not (tmp_path / "splits").exists()


def _split(tmp_path, rows, text=None, name="d.jsonl", **spec):
    """The train split of a data file written as `text` (or JSON lines of `rows`)."""
    settings = _settings(tmp_path, rows, **{"answer_format": "plain", **spec})
    if text is not None:
        path = tmp_path / name
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
        settings["data"]["train"] = dict(settings["data"]["train"], path=str(path))
        settings["data"]["diagnostic"] = settings["data"]["benchmarks"]["gsm8k"] = settings["data"]["train"]
    return build_splits(settings)["train"]


def test_golds_and_problems_are_read_as_written(tmp_path):
    """No type guessing: a 20-digit answer keeps its digits, "7" stays "7", numbers stay as
    written, and a numeric id column keeps its text."""
    text = ('{"question": 12, "answer": 98765432109876543210, "id": 1}\n'
            '{"question": "b", "answer": "7", "id": 2}\n{"question": "c", "answer": 7.50, "id": 3.0}\n'
            '{"question": "d", "answer": "0042", "id": "x"}\n')
    train = _split(tmp_path, [], text, id_field="id")
    assert train["answer"].tolist() == ["98765432109876543210", "7", "7.50", "0042"]
    assert train["problem"].tolist() == ["12", "b", "c", "d"]
    assert train["prompt_id"].tolist() == ["1", "2", "3.0", "x"]


def test_chat_messages_and_verl_reward_models_give_their_text(tmp_path, capsys):
    rows = [{"question": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}],
             "answer": {"ground_truth": "2", "style": "rule"}}]
    train = _split(tmp_path, rows)
    assert train["problem"].tolist() == ["1+1?"] and train["answer"].tolist() == ["2"]
    assert (f"warning: {tmp_path / 'd.jsonl'}: field 'question' holds chat messages with a system turn: only "
            "the user turn is used (prompt.system sets a system message)") in capsys.readouterr().err


def test_a_bom_an_array_and_one_object_are_read(tmp_path):
    row = {"question": "1+1?", "answer": "2"}
    assert _split(tmp_path, [], b"\xef\xbb\xbf" + json.dumps(row).encode() + b"\n")["answer"].tolist() == ["2"]
    assert _split(tmp_path, [], json.dumps([row, row], indent=2), name="d.json")["answer"].tolist() == ["2", "2"]
    assert _split(tmp_path, [], json.dumps(row, indent=2), name="d.json")["answer"].tolist() == ["2"]


@pytest.mark.parametrize("rows, text, spec, message", [
    ([{"question": "a", "answer": "so ####  "}], None, {"answer_format": "gsm8k"},
     "row 1: answer_format gsm8k, but field 'answer' has nothing after '####'"),
    ([{"question": None, "answer": "1"}], None, {}, "row 1: field 'question' is empty"),
    ([{"question": "a", "answer": "1", "id": None}], None, {"id_field": "id"}, "blank id in row 1"),
    ([{"question": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                    {"role": "user", "content": "c"}], "answer": "1"}], None, {},
     "row 1: field 'question' holds chat messages (user, assistant, user), not one user turn: give the "
     "problem as text"),
    ([{"question": "a", "answer": {"value": "1"}}], None, {},
     "row 1: field 'answer' holds an object (keys value), not text: name the field that holds the text"),
    ([{"question": "a", "answer": {"ground_truth": ["1", "one"]}}], None, {},
     "row 1: field 'answer.ground_truth' holds a list, not text"),
    ([], '{"question": "a", "answer": "1"}\n\n{"question": "b", "answer": 2\n', {},
     "line 3: not valid JSON (Expecting ',' delimiter, column 30)"),
    ([], '{"question": "a", "answer": "1"}\n[1, 2]\n', {},
     "line 2: a JSON array, not an object (one object per line, or one array of objects)"),
])
def test_a_value_that_is_not_text_is_one_line(tmp_path, rows, text, spec, message):
    with pytest.raises(BoundaryError) as err:
        _split(tmp_path, rows, text, **spec)
    assert str(err.value) == f"{tmp_path / 'd.jsonl'}: {message}"
