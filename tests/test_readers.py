"""Readers: each tool's format (fixtures built as the tool writes them, see
tests/fixtures/readers/make_fixtures.py) counted into n and c per prompt, with the tool's own
verdicts and re-graded against a gold file; the biased-metric warnings; the CLI on them."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import pythonpath

from boundary import readers
from boundary.core.errors import BoundaryError
from boundary.core.passk import pass_at_k
from boundary.readers import lighteval
from boundary.readers.problems import text_id

FIX = Path(__file__).parent / "fixtures" / "readers"
LIGHTEVAL = FIX / "details_lighteval|fixture|0_2026-01-01T00-00-00.parquet"
TRUE = {"add": 3, "mul": 0, "frac": 1}                 # truly correct of 4 (make_fixtures.py)
HACKED = {"add": 4, "mul": 0, "frac": 1}               # what verl's and OpenRLHF's rewards say
CHAT = "system\nPlease reason step by step.\nuser\n{} Put the answer in \\boxed{{}}.\nassistant\n"
PROBLEMS = {"add": "What is 2 + 3?", "mul": "Compute 7 times 6.", "frac": "Simplify 1/2 + 1/4."}


def counts_of(run, key=lambda p: p):
    c = run.counts.set_index("prompt_id")
    assert (c["n"] == 4).all()
    return {key(p): int(v) for p, v in c["c"].items()}


def by_text(template):
    ids = {text_id(template.format(q)): p for p, q in PROBLEMS.items()}
    return lambda pid: ids[pid]


@pytest.mark.parametrize("path, fmt", [
    (FIX / "verl_dumps", "verl"), (FIX / "verl_dumps" / "12.jsonl", "verl"), (FIX / "verl_generation.parquet", "verl"),
    (LIGHTEVAL, "lighteval"), (FIX / "details_old_fixture.parquet", "lighteval"),
    (FIX / "openrlhf.jsonl", "openrlhf"), (FIX / "samples.jsonl", "samples"), (FIX / "samples_wide.parquet", "samples"),
])
def test_detects_each_format(path, fmt):
    assert readers.detect(path) == fmt


def test_verl_dump_uses_acc_and_keys_by_prompt_text():
    run = readers.read(FIX / "verl_dumps" / "12.jsonl")
    assert counts_of(run, by_text(CHAT)) == HACKED
    assert run.problems[text_id(CHAT.format(PROBLEMS["add"]))] == CHAT.format(PROBLEMS["add"])
    add = run.counts.set_index("prompt_id").loc[text_id(CHAT.format(PROBLEMS["add"]))]
    assert add["unique_positives"] == 2  # the hacked "6" is a distinct positive answer
    assert (add["modal_answer"], add["modal_share"]) == ("5", 0.75)  # over all 4 samples, through counts_of


def test_verl_dump_folder_reads_latest_or_given_step(capsys):
    assert counts_of(readers.read(FIX / "verl_dumps"), by_text(CHAT)) == HACKED  # step 12
    early = readers.read(FIX / "verl_dumps", options=readers.Options(step=5))
    assert counts_of(early, by_text(CHAT)) == {"add": 0, "mul": 0, "frac": 0}
    with pytest.raises(BoundaryError, match="no dump for step 7"):
        readers.read(FIX / "verl_dumps", options=readers.Options(step=7))
    # Each input its own step: DIR@step=N overrides --step.
    assert counts_of(readers.read(f"{FIX / 'verl_dumps'}@step=5", options=readers.Options(step=12)),
                     by_text(CHAT)) == {"add": 0, "mul": 0, "frac": 0}
    assert readers.read(f"{FIX / 'verl_dumps'}/@step=5").counts["c"].sum() == 0
    with pytest.raises(BoundaryError, match="@step= selects a step of a folder"):
        readers.read(f"{FIX / 'verl_dumps' / '12.jsonl'}@step=5")


def test_verl_dump_score_threshold_without_acc(tmp_path):
    lines = [json.loads(x) for x in (FIX / "verl_dumps" / "12.jsonl").read_text().splitlines()]
    for x in lines:
        del x["acc"]
    (tmp_path / "3.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert counts_of(readers.read(tmp_path / "3.jsonl"), by_text(CHAT)) == HACKED  # score 1 / -1 > 0.5


VERL_USER = "{} Let's think step by step and output the final answer within \\boxed{{}}."


def test_verl_generation_graded_on_its_own_ground_truth():
    run = readers.read(FIX / "verl_generation.parquet", options=readers.Options(verify_workers=1))
    assert counts_of(run, by_text(VERL_USER)) == TRUE  # the user message keys the prompt, not extra_info.index
    assert run.problems[text_id(VERL_USER.format(PROBLEMS["add"]))] == VERL_USER.format(PROBLEMS["add"])
    assert run.keyed_by == "text"


def test_a_problem_twice_in_verl_generation_is_pooled(tmp_path):
    """Without row ids a problem asked twice is one prompt: its responses pool (n = 8)."""
    df = pd.read_parquet(FIX / "verl_generation.parquet")
    pd.concat([df, df.iloc[:1]], ignore_index=True).to_parquet(tmp_path / "g.parquet")
    run = readers.read(tmp_path / "g.parquet", options=readers.Options(verify_workers=1))
    add = run.counts.set_index("prompt_id").loc[text_id(VERL_USER.format(PROBLEMS["add"]))]
    assert (add["n"], add["c"]) == (8, 6)


def test_lighteval_counts_from_the_metric_new_and_old():
    new = readers.read(LIGHTEVAL)
    assert counts_of(new, by_text("Solve the following problem.\n\n{}")) == TRUE
    old = readers.read(FIX / "details_old_fixture.parquet")
    assert counts_of(old, by_text("Solve: {}")) == TRUE
    assert len(new.samples) == 12 and new.samples["correct"].isna().all()  # texts kept for the page


LE13_N4 = FIX / "details_lighteval_n4|math_500|0_2026-01-01T00-00-00.parquet"
LE_QUERY = "Solve the following problem.\n\n{}"


def test_lighteval_013_task_at_n_reads_every_text(capsys):
    """math_500@n=4 in lighteval 0.13 keeps the key pass@k:k=1&n=1 but scores all 4 texts."""
    run = readers.read(LE13_N4)
    assert counts_of(run, by_text(LE_QUERY)) == TRUE  # n = 4 texts, c = 4 x value (not n = 1, c rounded)
    err = capsys.readouterr().err
    assert "'pass@k:k=1&n=1' holds values over all 4 texts" in err and LE13_N4.name in err


def test_lighteval_010_multi_sample_metric_matching_the_texts(capsys):
    """aime24 in lighteval 0.10: math_pass@1:{1,4}_samples over 4 texts; the one over all 4 counts."""
    run = readers.read(FIX / "details_old_aime.parquet")
    assert counts_of(run, by_text("Solve: {}")) == TRUE
    assert "warning" not in capsys.readouterr().err


def test_lighteval_metric_over_fewer_texts_is_refused(tmp_path):
    """Only a metric over the first text, 4 texts stored, values 0/1: n cannot be told: refuse."""
    df = pd.read_parquet(FIX / "details_old_aime.parquet")
    df["metrics"] = [{"math_pass@1:1_samples": m["math_pass@1:1_samples"]} for m in df["metrics"]]
    df.to_parquet(tmp_path / "details_x.parquet")
    with pytest.raises(BoundaryError, match=r"details_x.parquet: 4 texts per document, but no metric covers them "
                                            r"all \(math_pass@1:1_samples\); give --gold FILE"):
        readers.read(tmp_path / "details_x.parquet")
    grader = readers.Grader(FIX / "gold.jsonl", workers=1)
    try:  # --gold grades the texts instead
        assert counts_of(readers.read(tmp_path / "details_x.parquet", options=readers.Options(grader=grader))) == TRUE
    finally:
        grader.close()


def test_lighteval_010_litellm_message_prompt():
    """full_prompt as chat messages (LiteLLM): read, keyed by the query (example)."""
    run = readers.read(FIX / "details_old_litellm.parquet")
    assert counts_of(run, by_text("Solve: {}")) == TRUE


def test_trl_conversational_prompts_and_completions(tmp_path):
    for name in ("trl_conversational.jsonl", "trl_conversational.parquet"):
        run = readers.read(FIX / name)
        assert counts_of(run, by_text("{}")) == TRUE  # the last user turn keys the prompt
        assert run.samples["completion"].iloc[0] == "2 + 3 = 5, so \\boxed{5}."


def test_row_number_ids_beside_text_are_not_ids(tmp_path):
    """A samples file's id / idx / index column beside prompt text is most often a row number:
    the text keys the prompt; a prompt_id column is the tool's own id."""
    rows = [{"index": i, "prompt": q, "completion": "x", "correct": True} for i, q in enumerate(PROBLEMS.values())]
    pd.DataFrame(rows).to_json(tmp_path / "s.jsonl", orient="records", lines=True)
    run = readers.read(tmp_path / "s.jsonl")
    assert run.keyed_by == "text" and set(run.counts["prompt_id"]) == {text_id(q) for q in PROBLEMS.values()}
    assert readers.read(FIX / "samples_wide.parquet").keyed_by == "prompt_id"


def test_verl_dump_before_gts():
    """verl v0.4.1 / v0.5.0 dumps carry no gts: read the same."""
    assert readers.detect(FIX / "verl_v050") == "verl"
    assert counts_of(readers.read(FIX / "verl_v050"), by_text(CHAT)) == HACKED


def test_count_from_metric_inverts_the_estimator():
    for n in (1, 4, 16, 33):
        for k in sorted({1, 2, n // 2 or 1}):
            for c in range(0, n - k + 1):  # below 1 the estimator is strictly increasing in c
                value = float(pass_at_k(n, c, k))
                assert lighteval.count_from_metric(value, n, k) == c
    assert lighteval.metric_spec("pass@k:k=1&n=16") == (1, 16)
    assert lighteval.metric_spec("avg@n:n=8") == (1, 8)
    assert lighteval.metric_spec("math_pass@1:32_samples") == (1, 32)
    assert lighteval.metric_spec("pass@10:32_samples") == (10, 32)
    assert lighteval.metric_spec("maj@n:n=8") is None
    assert lighteval.metric_spec("pass@k:k=1") == (1, None)  # lighteval 0.13 aime24: n = every text
    assert lighteval.metric_spec("pass@k:n=16&k=4") == (4, 16)
    assert lighteval.metric_spec("gpqa_pass@k:k=1&n=8") == (1, 8)
    assert lighteval.metric_spec("pass@k:k=1&t=0.5") is None


def test_openrlhf_reward_threshold_and_rs_warning(capsys):
    run = readers.read(FIX / "openrlhf.jsonl")
    assert counts_of(run, by_text("{}\n")) == HACKED
    assert "warning" not in capsys.readouterr().err
    best = readers.read(FIX / "openrlhf_rs.jsonl")
    assert (best.counts["n"] == 1).all()
    assert "--post_processor rs" in capsys.readouterr().err
    strict = readers.read(FIX / "openrlhf.jsonl", options=readers.Options(reward_threshold=0.95))
    assert strict.counts["c"].sum() == 0


def test_plain_samples_long_and_wide():
    run = readers.read(FIX / "samples.jsonl")
    assert counts_of(run) == TRUE
    assert run.counts["modal_share"].isna().all() and run.counts["modal_answer"].isna().all()  # no answers: not measured
    wide = readers.read(FIX / "samples_wide.parquet")
    assert counts_of(wide) == TRUE and wide.problems["add"] == PROBLEMS["add"]


@pytest.mark.parametrize("path", [FIX / "verl_dumps", FIX / "verl_generation.parquet", LIGHTEVAL,
                                  FIX / "details_old_fixture.parquet", FIX / "openrlhf.jsonl", FIX / "samples.jsonl",
                                  FIX / "samples_wide.parquet"])
def test_regrading_against_gold_gives_the_true_counts_in_every_format(path, grader):
    run = readers.read(path, options=readers.Options(grader=grader))
    assert counts_of(run) == TRUE  # the hacked reward is overruled; prompts keyed by the gold ids
    assert run.problems["mul"] == PROBLEMS["mul"]
    assert run.samples["answer"].notna().all()


def test_base_and_policy_from_one_dump_folder(tmp_path):
    """Each input its own step: the base at step 5 and the policy at step 12 of one folder."""
    from boundary.analysis import diagnose as dg

    dumps = FIX / "verl_dumps"
    dg.main(["--base", f"{dumps}@step=5", "--trained", f"grpo:0={dumps}@step=12", "--ks", "1,4", "--coverage-k", "4",
             "--resamples", "50", "--no-figures", "--out", str(tmp_path / "o")])
    prompts = pd.read_csv(tmp_path / "o" / "prompts.csv")
    trained = prompts[prompts["method"] == "grpo"]
    assert trained["base_c"].sum() == 0 and sorted(trained["c"]) == [0, 1, 4]  # 2 gained, none lost


def test_tools_whose_ids_collide_pair_by_problem(tmp_path):
    """lighteval's doc.id and verl's extra_info.index are both 0, 1, 2, for other problems:
    the diagnosis pairs by the problem text, so every prompt's counts meet their own."""
    from boundary.analysis import diagnose as dg

    base = readers.read(LE13_N4)
    policy = readers.read(FIX / "verl_generation.parquet", options=readers.Options(verify_workers=1))
    paired = readers.pair([base, policy], ["base", "policy"])
    b = paired[0].counts.set_index("prompt_id")["c"]
    p = paired[1].counts.set_index("prompt_id")["c"]
    assert set(b.index) == set(p.index) and (b == p[b.index]).all()
    dg.main(["--base", str(LE13_N4), "--trained", f"verl:0={FIX / 'verl_generation.parquet'}", "--verify-workers", "1",
             "--ks", "1,4", "--coverage-k", "4", "--resamples", "50", "--no-figures", "--out", str(tmp_path / "o")])
    prompts = pd.read_csv(tmp_path / "o" / "prompts.csv")
    trained = prompts[prompts["method"] == "verl"]
    assert (trained["c"] == trained["base_c"]).all() and sorted(trained["c"]) == [0, 1, 3]


def test_gold_verl_dataset_matches_lighteval_by_problem(capsys):
    """A verl dataset parquet as --gold (extra_info.index 0..2) grades lighteval (doc.id 0..2,
    another order) by problem, not by row number."""
    g = readers.Grader(FIX / "verl_dataset.parquet", workers=1)
    try:
        run = readers.read(LE13_N4, options=readers.Options(grader=g))
    finally:
        g.close()
    assert counts_of(run, lambda pid: {text_id(VERL_USER.format(q)): p for p, q in PROBLEMS.items()}[pid]) == TRUE
    assert run.keyed_by == "gold"


def test_texts_that_disagree_under_one_id_are_refused(tmp_path):
    rows = [{"prompt_id": "0", "prompt": PROBLEMS["add"], "completion": "x", "correct": True},
            {"prompt_id": "1", "prompt": PROBLEMS["mul"], "completion": "y", "correct": False}]
    pd.DataFrame(rows).to_json(tmp_path / "a.jsonl", orient="records", lines=True)
    swapped = [dict(r, prompt_id=str(1 - int(r["prompt_id"]))) for r in rows]
    pd.DataFrame(swapped).to_json(tmp_path / "b.jsonl", orient="records", lines=True)
    a, b = readers.read(tmp_path / "a.jsonl"), readers.read(tmp_path / "b.jsonl")
    with pytest.raises(BoundaryError, match=r"b.jsonl: prompt_id 1 asks 'What is 2 \+ 3\?', but a.jsonl asks "
                                           r"'Compute 7 times 6.' under that id"):
        readers.pair([a, b], ["a.jsonl", "b.jsonl"])
    pd.DataFrame({"prompt_id": ["0", "1"], "problem": [PROBLEMS["mul"], PROBLEMS["add"]],
                  "answer": ["42", "5"]}).to_csv(tmp_path / "gold.csv", index=False)
    with pytest.raises(BoundaryError, match="a.jsonl: prompt_id 0 asks .What is 2 .* under that id"):
        readers.read(tmp_path / "a.jsonl", options=readers.Options(grader=readers.Grader(tmp_path / "gold.csv")))


def test_pairing_refusals_are_one_line(tmp_path):
    verl_run = readers.read(FIX / "verl_dumps")
    counts = tmp_path / "counts.csv"
    pd.DataFrame({"prompt_id": ["add", "mul", "frac"], "n": 4, "c": [3, 0, 1]}).to_csv(counts, index=False)
    with pytest.raises(BoundaryError, match="counts.csv: keyed by prompt_id only .* give --gold FILE"):
        readers.pair([readers.read(counts), verl_run], [str(counts), "dumps"])
    other = tmp_path / "o.jsonl"
    pd.DataFrame({"prompt": ["What is 9 + 9?"] * 2, "completion": ["a", "b"], "correct": [True, False]}).to_json(
        other, orient="records", lines=True)
    with pytest.raises(BoundaryError, match="o.jsonl: 1 prompt.s. match no problem of dumps"):
        readers.pair([verl_run, readers.read(other)], ["dumps", str(other)])
    twice = tmp_path / "t.jsonl"
    pd.DataFrame({"prompt": [f"Warm-up. {PROBLEMS['add']}", f"{PROBLEMS['add']} Twice.", PROBLEMS["mul"],
                             PROBLEMS["frac"]], "completion": "a", "correct": True}).to_json(
        twice, orient="records", lines=True)
    with pytest.raises(BoundaryError, match="t.jsonl: two prompts match one problem of dumps"):
        readers.pair([verl_run, readers.read(twice)], ["dumps", str(twice)])


def test_extractor_that_finds_nothing_is_refused(tmp_path):
    """GSM8K-style completions (#### 5) graded with the boxed extractor: refused in one line
    naming the file, the extractor and the others (no verdicts in the file: no --keep-scores)."""
    df = pd.read_parquet(FIX / "verl_generation.parquet")
    df["responses"] = [[f"so the answer is\n#### {i}" for i in range(4)] for _ in range(len(df))]
    df.to_parquet(tmp_path / "gsm8k_gen.parquet")
    with pytest.raises(BoundaryError) as err:
        readers.read(tmp_path / "gsm8k_gen.parquet", options=readers.Options(verify_workers=1))
    line = str(err.value)
    assert line.startswith(f"{tmp_path / 'gsm8k_gen.parquet'}: extractor 'boxed' found no answer in 100% of 12 "
                           "completions (one ends 'so the answer is #### 0')") and "\n" not in line
    assert "--extractor last_number or --extractor boxed_or_last_number" in line and "--keep-scores" not in line


def test_problem_matching():
    from boundary.readers.problems import ProblemIndex, core, message_text

    texts = ["Q: a long problem one. A:", "Q: another problem two. A:"]
    cores = core(texts)  # the shared template goes (and with it what the problems share)
    assert all(c in t and "Q:" not in c and "A:" not in c for c, t in zip(cores, texts))
    index = ProblemIndex({"x": "Find the sum of all integers n such that n^2 < 10.", "y": "2 + 2"})
    assert index.match("Solve step by step.\n\nFind  the sum of all integers n such that n^2 < 10.\nAnswer:") == "x"
    assert index.match("What is 2 + 2?") == "y" and index.match("unrelated") is None
    assert message_text([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]) == "q"


def test_keep_scores_only_keys_prompts():
    g = readers.Grader(FIX / "gold.jsonl", regrade=False)
    run = readers.read(FIX / "verl_dumps", options=readers.Options(grader=g))
    assert counts_of(run) == HACKED


@pytest.fixture(scope="module")
def grader():
    g = readers.Grader(FIX / "gold.jsonl", "boxed", timeout=5, workers=1)
    yield g
    g.close()


def test_gold_file_problems(tmp_path):
    pd.DataFrame({"problem": ["What is 2 + 3?", "2 + 3"], "answer": ["5", "5"]}).to_csv(tmp_path / "g.csv", index=False)
    g = readers.Grader(tmp_path / "g.csv")
    # The problem found last in the prompt wins, so a few-shot example before it does not.
    assert g.match("Example: 2 + 3 = 5.\nNow: What is 2 + 3?") == text_id("What is 2 + 3?")
    assert g.match("nothing like it") is None
    with pytest.raises(BoundaryError, match="match no problem"):
        readers.read(FIX / "openrlhf.jsonl", options=readers.Options(grader=g))
    pd.DataFrame({"answer": ["5"]}).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(BoundaryError, match="needs prompt_id or problem"):
        readers.Grader(tmp_path / "bad.csv")


def test_gold_answers_are_read_as_written(tmp_path):
    """No type guessing in a gold file: a 20-digit answer keeps its digits, "7" stays "7"; verl's
    reward_model gives its ground truth, chat messages their question; a null answer is one line."""
    (tmp_path / "g.jsonl").write_text(
        '{"prompt_id": 1, "answer": 98765432109876543210}\n{"prompt_id": 2, "answer": "7"}\n'
        '{"prompt_id": 3, "answer": {"ground_truth": "1/2", "style": "rule"}}\n{"prompt_id": 4, "answer": 7.0}\n')
    g = readers.Grader(tmp_path / "g.jsonl")
    assert g.answers == {"1": "98765432109876543210", "2": "7", "3": "1/2", "4": "7.0"}
    (tmp_path / "m.jsonl").write_text(json.dumps({"prompt": [{"role": "user", "content": "What is 2 + 3?"}],
                                                  "answer": "5"}) + "\n")
    assert readers.Grader(tmp_path / "m.jsonl").problems == {text_id("What is 2 + 3?"): "What is 2 + 3?"}
    (tmp_path / "p.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n{"problem": null, "answer": "3"}\n')
    with pytest.raises(BoundaryError) as err:
        readers.Grader(tmp_path / "p.jsonl")
    assert str(err.value) == (f"{tmp_path / 'p.jsonl'}: blank problem in row 2 (without prompt_id the problem "
                              "text keys the answer)")
    (tmp_path / "n.jsonl").write_text('{"prompt_id": "a", "answer": null}\n')
    with pytest.raises(BoundaryError) as err:
        readers.Grader(tmp_path / "n.jsonl")
    assert str(err.value) == f"{tmp_path / 'n.jsonl'}: row 1: field 'answer' is empty"


def test_a_null_prompt_id_in_samples_is_one_line(tmp_path):
    (tmp_path / "s.jsonl").write_text('{"prompt_id": "a", "completion": "x", "correct": true}\n'
                                      '{"prompt_id": null, "completion": "y", "correct": false}\n')
    with pytest.raises(BoundaryError) as err:
        readers.read(tmp_path / "s.jsonl")
    assert str(err.value) == f"{tmp_path / 's.jsonl'}: blank prompt_id in row 2"


def test_biased_aggregates_warn_or_refuse(tmp_path, capsys):
    pd.DataFrame({"prompt_id": ["a", "b"], "n": [4, 4], "c": [1, 0], "acc/best@4/mean": [1.0, 0.0]}).to_csv(
        tmp_path / "counts.csv", index=False)
    run = readers.read(tmp_path / "counts.csv")
    assert run.counts["c"].tolist() == [1, 0]
    err = capsys.readouterr().err
    assert "best@4" in err and "not an unbiased pass@k" in err
    pd.DataFrame({"step": [100], "eval_math_pass8": [0.7], "eval_math_pass1": [0.3]}).to_json(
        tmp_path / "logs.jsonl", orient="records", lines=True)
    with pytest.raises(BoundaryError, match="OpenRLHF's passN"):
        readers.read(tmp_path / "logs.jsonl")
    pd.DataFrame({"val-core/math/acc/best@8/mean": [0.9]}).to_json(tmp_path / "verl.jsonl", orient="records", lines=True)
    with pytest.raises(BoundaryError, match="verl's best@N"):
        readers.read(tmp_path / "verl.jsonl")


def test_unverdicted_samples_need_gold(tmp_path):
    pd.DataFrame({"prompt_id": ["a"], "completion": ["x"]}).to_json(tmp_path / "s.jsonl", orient="records", lines=True)
    with pytest.raises(BoundaryError, match="give --gold"):
        readers.read(tmp_path / "s.jsonl")
    (tmp_path / "t.txt").write_text("x")
    with pytest.raises(BoundaryError, match="unknown file type"):
        readers.read(tmp_path / "t.txt")
    with pytest.raises(BoundaryError, match="format not recognised"):
        pd.DataFrame({"foo": [1]}).to_csv(tmp_path / "f.csv", index=False)
        readers.read(tmp_path / "f.csv")


def test_jsonl_with_changing_types_falls_back(tmp_path):
    rows = [{"prompt_id": "a", "completion": "x", "reward": 1}, {"prompt_id": "a", "completion": "y", "reward": "0.0"}]
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert readers.read(tmp_path / "s.jsonl").counts[["n", "c"]].values.tolist() == [[2, 1]]


def test_diagnose_cli_on_tool_formats(tmp_path):
    """verl base, lighteval and OpenRLHF trained, plain-samples calibration: one diagnosis,
    every prompt keyed by the gold file and re-graded."""
    from boundary.analysis import diagnose as dg

    dg.main(["--base", str(FIX / "verl_dumps"), "--trained", f"le:0={LIGHTEVAL}",
             "--trained", f"orl:0={FIX / 'openrlhf.jsonl'}", "--calibration", str(FIX / "samples_wide.parquet"),
             "--gold", str(FIX / "gold.jsonl"), "--verify-workers", "1", "--ks", "1,4", "--coverage-k", "4",
             "--resamples", "200", "--no-figures", "--out", str(tmp_path / "out")])
    passk = pd.read_csv(tmp_path / "out" / "passk.csv")
    p1 = passk[(passk["regime"] == "all") & (passk["k"] == 1)].set_index("method")["value"]
    assert p1["base"] == pytest.approx(4 / 12) and p1["le"] == pytest.approx(4 / 12) and p1["orl"] == pytest.approx(4 / 12)
    prompts = pd.read_csv(tmp_path / "out" / "prompts.csv")
    assert set(prompts["prompt_id"]) == {"add", "mul", "frac"}


HEAVY = ("torch", "transformers", "trl", "snakemake", "accelerate", "datasets", "tokenizers", "yaml", "jsonschema",
         "tqdm", "vllm")


def test_diagnose_imports_nothing_of_the_pipeline(tmp_path):
    """`boundary diagnose` (re-grading, figures and page included) runs with the pipeline's
    packages made unimportable: a base + analysis install is enough."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import importlib.abc, sys
        HEAVY = {HEAVY!r}
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in HEAVY:
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        from boundary.cli import main
        if __name__ == "__main__":
            code = main(["diagnose", "--base", {str(FIX / 'verl_dumps')!r}, "--trained", "le:0={LIGHTEVAL}",
                         "--gold", {str(FIX / 'gold.jsonl')!r}, "--verify-workers", "1", "--ks", "1,4",
                         "--coverage-k", "4", "--resamples", "100", "--out", {str(tmp_path / 'out')!r}])
            loaded = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
            print("LOADED", loaded)
            sys.exit(code)
    """)
    (tmp_path / "run.py").write_text(script)
    env = {**__import__("os").environ, "PYTHONPATH": pythonpath()}
    run = subprocess.run([sys.executable, str(tmp_path / "run.py")], capture_output=True, text=True, env=env,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "LOADED []" in run.stdout
    assert (tmp_path / "out" / "report.html").exists()


def test_boolean_verdicts_ignore_the_reward_threshold(tmp_path):
    pd.DataFrame({"prompt_id": ["a", "a", "a"], "completion": ["x", "y", "z"], "correct": [1, 0, 1]}).to_csv(
        tmp_path / "s.csv", index=False)
    run = readers.read(tmp_path / "s.csv", options=readers.Options(reward_threshold=1.0))
    assert run.counts["c"].tolist() == [2]


def test_bad_uncertainty_and_verifier_options_are_one_line(tmp_path):
    from boundary.analysis import diagnose as dg

    args = ["--base", str(FIX / "samples.jsonl"), "--trained", f"x:0={FIX / 'samples_wide.parquet'}",
            "--ks", "1", "--resamples", "10", "--no-figures", "--out", str(tmp_path / "o")]
    with pytest.raises(BoundaryError, match="argument --level: .95. is not a number between 0 and 1"):
        dg.main(args + ["--level", "95"])
    with pytest.raises(BoundaryError, match="argument --verify-workers: .0. is not a whole number >= 1"):
        dg.main(args + ["--gold", str(FIX / "gold.jsonl"), "--verify-workers", "0"])
    with pytest.raises(BoundaryError, match="--extractor"):
        dg.main(args + ["--gold", str(FIX / "gold.jsonl"), "--extractor", "first_word"])
    assert not (tmp_path / "o").exists()


def last_number_run(tmp_path, wrong_rewards=False):
    """A newcomer's files (issue 37): ten prompts of eight samples whose answers are last
    numbers, with the tool's own reward (right, or flipped on every sample), and a gold file."""
    rows = [{"prompt": f"What is {i} + {i}?", "completion": f"Adding them gives {2 * i + (j % 2)}",
             "reward": float((j % 2 == 0) != wrong_rewards)} for i in range(10) for j in range(8)]
    pd.DataFrame(rows).to_json(tmp_path / "run.jsonl", orient="records", lines=True)
    pd.DataFrame({"problem": [f"What is {i} + {i}?" for i in range(10)], "answer": [str(2 * i) for i in range(10)]}
                 ).to_json(tmp_path / "gold.jsonl", orient="records", lines=True)
    return str(tmp_path / "run.jsonl"), str(tmp_path / "gold.jsonl")


def test_diagnose_refuses_answers_the_extractor_cannot_read(tmp_path, capsys):
    """--gold with the default boxed extractor on last-number answers: one line naming the
    file and the options that fix it, nothing written; each of those options then works."""
    from boundary.analysis import diagnose as dg

    run, gold = last_number_run(tmp_path)
    trained = shutil.copy(run, tmp_path / "trained.jsonl")  # the base's own file is refused as a trained run
    args = ["--base", run, "--trained", f"grpo:0={trained}", "--gold", gold, "--verify-workers", "1", "--ks", "1,8",
            "--resamples", "20", "--no-figures"]
    with pytest.raises(BoundaryError) as err:
        dg.main(args + ["--out", str(tmp_path / "o")])
    line = str(err.value)
    assert line.startswith(f"{run}: extractor 'boxed' found no answer in 100% of 80 completions") and "\n" not in line
    assert "--extractor last_number" in line and "--keep-scores" in line
    assert not (tmp_path / "o").exists()
    for fix in (["--extractor", "last_number"], ["--keep-scores"]):
        out = tmp_path / fix[0].strip("-")
        dg.main(args + fix + ["--out", str(out)])
        prompts = pd.read_csv(out / "prompts.csv")
        assert (prompts["c"] == 4).all()  # the even samples are right, by either grade


def test_regrading_that_overrules_most_verdicts_is_warned(tmp_path, capsys):
    run, gold = last_number_run(tmp_path, wrong_rewards=True)
    g = readers.Grader(gold, "last_number", workers=1)
    try:
        counts = readers.read(run, options=readers.Options(grader=g)).counts
    finally:
        g.close()
    assert (counts["c"] == 4).all()  # the re-grade counts
    err = capsys.readouterr().err
    assert err.count("warning:") == 1
    assert (f"warning: {run}: re-grading against {gold} disagrees with the file's own verdicts on 100% of 80 "
            "samples (50% correct re-graded, 50% by the file)") in err and "--keep-scores" in err


def test_mixed_n_per_prompt_is_one_line_per_file(tmp_path, capsys):
    rows = [{"prompt_id": p, "completion": "x", "correct": j == 0} for p, n in (("a", 4), ("b", 6), ("c", 6))
            for j in range(n)]
    pd.DataFrame(rows).to_json(tmp_path / "mixed.jsonl", orient="records", lines=True)
    counts = readers.read(tmp_path / "mixed.jsonl").counts
    assert sorted(counts["n"]) == [4, 6, 6]
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and (f"{tmp_path / 'mixed.jsonl'}: n per prompt ranges from 4 to 6: pass@k uses "
                                           "each prompt's own n, and ks above 4 are dropped") in err
    readers.read(FIX / "samples.jsonl")  # one n: no line
    assert "n per prompt" not in capsys.readouterr().err


def test_a_counts_file_with_problem_text_names_it_beside_the_id(tmp_path):
    pd.DataFrame({"prompt_id": ["a", "b"], "n": 4, "c": [1, 3], "problem": ["What is 2 + 3?", "Compute 7 times 6."]}
                 ).to_csv(tmp_path / "c.csv", index=False)
    assert readers.read(tmp_path / "c.csv").problems == {"a": "What is 2 + 3?", "b": "Compute 7 times 6."}
    pd.DataFrame({"prompt_id": ["a", "b"], "n": 4, "c": [1, 5], "problem": ["What is 2 + 3?", "Compute 7 times 6."]}
                 ).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(BoundaryError, match=r"bad.csv: c > n for prompt_id b \('Compute 7 times 6.'\)$"):
        readers.read(tmp_path / "bad.csv")
