"""Procedural tasks: many valid, varied tasks from bundled tables, none from the held-out
sources; the held-out tasks themselves; and a plain program that solves every kind."""

import collections
import hashlib
import json
import pathlib
import random

import pytest

from mle_rl.env import action, graders, tasks, user_tasks
from mle_rl.env.procedural import generate, heldout, slow_wins, sources, wording


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def made(tmp_path_factory, cache):
    out = tmp_path_factory.mktemp("gen") / "tasks"
    return out, generate.generate(out, 24, seed=3, cache=cache)


def _digest(root: pathlib.Path) -> str:
    d = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        d.update(str(f.relative_to(root)).encode() + f.read_bytes())
    return d.hexdigest()


def test_generated_tasks_are_valid_varied_and_deterministic(made, cache, tmp_path):
    out, ids = made
    assert len(ids) == 24 and len(set(ids)) == 24
    kinds, metrics, id_cols = collections.Counter(), collections.Counter(), set()
    for tid in ids:
        task = user_tasks.load(out, tid)
        report = graders.grade_submission(task, task.public_dir / "sample_submission.csv")
        assert report["valid_submission"], (tid, report["message"])
        kinds[json.loads((out / tid / "generated.json").read_text())["kind"]] += 1
        metrics[task.metric] += 1
        id_cols.add(task.grader.id_col)
    assert len(kinds) == 4, kinds                       # binary, multiclass, (multi)regression
    assert len(metrics) >= 5 and len(id_cols) >= 3, (metrics, id_cols)
    again = generate.generate(tmp_path / "again", 24, seed=3, cache=cache)
    assert again == ids and _digest(tmp_path / "again") == _digest(out)


def test_text_tasks_keep_their_text_column_and_are_deterministic(cache, tmp_path):
    """text_share=1: every task from the docstring tables, its free text among the features
    (under the task's own column style), graded like any table; the mix is per task."""
    from mle_rl.env.procedural import text_sources
    from mle_rl.warmstart import generic
    ids = generate.generate(tmp_path / "t", 8, seed=2, cache=cache, text_share=1.0)
    assert len(ids) == 8 and all(i.split("-", 2)[2].startswith(("numpy", "pandas", "scikit",
                                                               "scipy", "python")) for i in ids)
    metrics = set()
    for tid in ids:
        task = user_tasks.load(tmp_path / "t", tid)
        assert generic.has_text(task.public_dir), tid
        report = graders.grade_submission(task, task.public_dir / "sample_submission.csv")
        assert report["valid_submission"], (tid, report["message"])
        metrics.add(task.metric)
    assert len(metrics) >= 3, metrics
    again = generate.generate(tmp_path / "again", 8, seed=2, cache=cache, text_share=1.0)
    assert again == ids and _digest(tmp_path / "again") == _digest(tmp_path / "t")
    mixed = generate.generate(tmp_path / "mixed", 20, seed=2, cache=cache, text_share=0.3)
    n_text = sum(generic.has_text(user_tasks.load(tmp_path / "mixed", t).public_dir)
                 for t in mixed)
    assert 1 <= n_text <= 12, n_text
    assert len(text_sources.tables()) == 26


def test_held_out_sources_never_reach_the_generator(cache):
    names = {t.name.split("/")[-1].lower() for t in sources.tables(cache)}
    assert names and not names & sources.HELD_OUT
    assert {"pima.te", "fgl", "caschool", "cpus"} <= sources.HELD_OUT


def test_held_out_tasks(tmp_path, cache):
    ids = heldout.write_all(tmp_path, cache=cache)
    assert ids == list(heldout.TASKS)
    for tid in ids:
        task = tasks.get_task(tid, task_dir=str(tmp_path), cache_dir=cache)
        report = graders.grade_submission(task, task.public_dir / "sample_submission.csv")
        assert report["valid_submission"], report
        assert "generated" not in task.description.lower()


def test_duration_task_is_a_smaller_draw_of_tabular_synth(tmp_path, cache):
    import pandas as pd

    assert slow_wins.write(tmp_path) == slow_wins.TASK_ID
    task = tasks.get_task(slow_wins.TASK_ID, task_dir=str(tmp_path), cache_dir=cache)
    train = pd.read_csv(task.public_dir / "train.csv")
    test = pd.read_csv(task.public_dir / "test.csv")
    assert len(train) + len(test) == slow_wins.N_ROWS and "target" not in test
    assert 0.4 < train["target"].mean() < 0.6            # the median split of the generator
    assert f"{len(train)} runs with the target" in task.description
    assert graders.grade_submission(task, task.public_dir / "sample_submission.csv")[
        "valid_submission"]
    answers = pd.read_csv(tmp_path / slow_wins.TASK_ID / "prepared/private/answers.csv")
    perfect = tmp_path / "perfect.csv"
    answers.to_csv(perfect, index=False)
    assert graders.grade_submission(task, perfect)["score"] == pytest.approx(1.0)
    first = _digest(tmp_path / slow_wins.TASK_ID)
    slow_wins.write(tmp_path)                              # rewritten: the same files
    assert _digest(tmp_path / slow_wins.TASK_ID) == first


def test_pages_are_worded_differently():
    import pandas as pd

    sample = pd.DataFrame({"id": [1, 2], "y": [0.5, 0.5]})
    pages = {wording.describe(random.Random(s), title="T", about="", origin="o", kind="binary",
                              metric="auc", id_col="id", targets=["y"], features=["a", "b"],
                              n_train=10, n_test=2, sample=sample, positive="`y` is 1")
             for s in range(20)}
    assert len(pages) >= 15


REFERENCE = """\
import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
sample = pd.read_csv("input/sample_submission.csv")
id_col, cols = sample.columns[0], list(sample.columns[1:])
target = [c for c in train.columns if c not in test.columns]
both = pd.get_dummies(pd.concat([train.drop(columns=target), test]).drop(columns=[id_col]),
                      dtype=float).fillna(0)
X, X_test = both[:len(train)].to_numpy(), both[len(train):].to_numpy()
sub = pd.DataFrame({id_col: test[id_col]})
KIND = "{kind}"
if KIND == "regression":
    model = RandomForestRegressor(50, random_state=0).fit(X, train[target].to_numpy(dtype=float))
    pred = model.predict(X_test).reshape(len(X_test), -1)
    for j, c in enumerate(cols):
        sub[c] = np.maximum(pred[:, j], 0) if "{metric}".startswith("rmsle") else pred[:, j]
else:
    model = RandomForestClassifier(100, random_state=0).fit(X, train[target[0]])
    if KIND == "labels":
        sub[cols[0]] = model.predict(X_test)
    elif len(cols) == 1:
        sub[cols[0]] = model.predict_proba(X_test)[:, list(model.classes_).index(1)]
    else:
        p = pd.DataFrame(model.predict_proba(X_test), columns=[str(c) for c in model.classes_])
        for c in cols:
            sub[c] = p[c] if c in p else 0.0
sub.to_csv("submission.csv", index=False)
"""


def test_a_plain_program_solves_every_kind_of_generated_task(made):
    """Each metric the generator uses gives a task that a plain random forest (written
    from the sample submission's columns) solves validly, mostly better than the sample
    submission itself: the tasks are learnable, not just well-formed. (Not every one: a
    target drawn from a table's columns can be near noise given the others.)"""
    out, ids = made
    seen = {}
    for tid in ids:
        task = user_tasks.load(out, tid)
        seen.setdefault(task.metric, task)
    assert len(seen) >= 6, sorted(seen)
    better = []
    for metric, task in sorted(seen.items()):
        kind = ("labels" if metric == "accuracy" else
                "classification" if "log_loss" in metric or metric == "auc" else "regression")
        code = REFERENCE.replace("{kind}", kind).replace("{metric}", metric)
        res = action.run_code(task, code,
                              instrumenter="none", timeout_s=120)
        assert res.status == "ok", (task.id, metric, res.message, res.stderr_tail[-500:])
        base = graders.grade_submission(task, task.public_dir / "sample_submission.csv")
        better.append(res.score < base["score"] if task.is_lower_better
                      else res.score > base["score"])
    assert sum(better) >= 2 * len(better) / 3, dict(zip(sorted(seen), better))
