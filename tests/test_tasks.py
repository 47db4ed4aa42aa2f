"""Built-in tasks: prepare, sample submissions, reference solutions, broken submissions;
the registry (unknown ids, idempotent prepare, a fake MLE-bench layout)."""

import json
import pathlib

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from sklearn.compose import make_column_transformer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from mle_rl.env import graders, tasks
from mle_rl.env.types import Task


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("mle_rl_cache")
    for task_id in tasks.BUILTIN_TASKS:
        tasks.prepare(task_id, cache_dir=root)
    return root


def _grade(task: Task, sub: pd.DataFrame, tmp_path) -> dict:
    path = tmp_path / "submission.csv"
    sub.to_csv(path, index=False)
    return graders.grade_submission(task, path)


def _read(task: Task):
    pub = task.public_dir
    return pd.read_csv(pub / "train.csv"), pd.read_csv(pub / "test.csv")


# ----------------------------------------------------------------------------- references


def ref_breast_cancer(train, test, pub):
    feats = [c for c in train.columns if c not in ("id", "malignant")]
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    model.fit(train[feats], train["malignant"])
    return pd.DataFrame({"id": test["id"], "malignant": model.predict_proba(test[feats])[:, 1]})


def ref_penguin_island(train, test, pub):
    cat, num = ["species", "sex"], ["bill_length_mm", "bill_depth_mm", "flipper_length_mm",
                                    "body_mass_g", "year"]
    pre = make_column_transformer(
        (make_pipeline(SimpleImputer(strategy="most_frequent"),
                       OneHotEncoder(handle_unknown="ignore")), cat),
        (make_pipeline(SimpleImputer(), StandardScaler()), num))
    model = make_pipeline(pre, LogisticRegression(max_iter=2000, C=0.5))
    model.fit(train[cat + num], train["island"])
    proba = model.predict_proba(test[cat + num])
    out = pd.DataFrame(proba, columns=model.classes_)
    out.insert(0, "id", test["id"].to_numpy())
    return out


def ref_diabetes(train, test, pub):
    feats = [c for c in train.columns if c not in ("id", "progression")]
    model = make_pipeline(StandardScaler(), Ridge(alpha=1.0)).fit(train[feats], train["progression"])
    return pd.DataFrame({"id": test["id"], "progression": model.predict(test[feats])})


def ref_tumor(train, test, pub):
    feats = [c for c in train.columns if c.startswith("mean_")]
    x_tr = np.c_[train[feats], train["diagnosis"] == "M"]
    x_te = np.c_[test[feats], test["diagnosis"] == "M"]
    out = pd.DataFrame({"id": test["id"]})
    for t in ("worst_area", "worst_concavity"):
        pred = np.expm1(LinearRegression().fit(x_tr, np.log1p(train[t])).predict(x_te))
        out[t] = np.clip(pred, 0, None)
    return out


def ref_digits(train, test, pub):
    def load(ids):  # [N, 256]: each PNG shrunk to 16x16
        return np.stack([np.asarray(Image.open(pub / "images" / f"{i}.png").resize((16, 16)),
                                    dtype=np.float32).ravel() / 255 for i in ids])

    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500, C=0.05))
    model.fit(load(train["id"]), train["label"])
    out = pd.DataFrame(model.predict_proba(load(test["id"])),
                       columns=[str(c) for c in model.classes_])
    out.insert(0, "id", test["id"].to_numpy())
    return out


def ref_authorship(train, test, pub):
    model = make_pipeline(TfidfVectorizer(sublinear_tf=True, min_df=2),
                          LogisticRegression(max_iter=1000, C=5.0))
    model.fit(train["text"], train["library"])
    out = pd.DataFrame(model.predict_proba(test["text"]), columns=model.classes_)
    out.insert(0, "id", test["id"].to_numpy())
    return out


def ref_span(train, test, pub):
    """Heuristic: after `param : type`, take words up to the next `word :` entry."""
    spans = []
    for text, param in zip(test["text"], test["param"]):
        words = text.split()
        start = next((k for k, w in enumerate(words) if w == param or w == param + ","), 0)
        k = start + 1
        if k < len(words) and words[k] == ":":
            k += 2  # skip ':' and the first word of the type
            while k < len(words) and (words[k - 1].endswith(",") or not words[k][:1].isupper()):
                k += 1
        end = next((j - 1 for j in range(k + 1, len(words)) if words[j] == ":"), len(words))
        spans.append(" ".join(words[k:end]))
    return pd.DataFrame({"id": test["id"], "selected_text": spans})


def ref_synth(train, test, pub):
    feats = [c for c in train.columns if c not in ("id", "target", "f_27")]
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    model.fit(train[feats], train["target"])
    return pd.DataFrame({"id": test["id"], "target": model.predict_proba(test[feats])[:, 1]})


# id -> (reference solution, (lo, hi) range its score must fall in)
REFERENCES = {
    "breast-cancer-diagnosis": (ref_breast_cancer, (0.97, 1.0)),
    "penguin-island": (ref_penguin_island, (0.2, 0.9)),
    "diabetes-progression": (ref_diabetes, (40.0, 65.0)),
    "tumor-worst-case": (ref_tumor, (0.03, 0.15)),
    "digit-images": (ref_digits, (0.02, 0.4)),
    "docstring-authorship": (ref_authorship, (0.3, 1.3)),
    "docstring-param-span": (ref_span, (0.6, 1.0)),
    "tabular-synth": (ref_synth, (0.65, 0.82)),
}


def test_every_builtin_has_a_reference():
    assert set(REFERENCES) == set(tasks.BUILTIN_TASKS)
    assert "tabular-synth" in tasks.BUILTIN_TASKS and len(tasks.BUILTIN_TASKS) >= 8


@pytest.mark.parametrize("task_id", sorted(REFERENCES))
def test_reference_beats_sample_and_scores_in_range(cache, task_id, tmp_path):
    task = tasks.get_task(task_id, cache_dir=cache)
    train, test = _read(task)
    sample = graders.grade_submission(task, task.public_dir / "sample_submission.csv")
    assert sample["valid_submission"], sample["message"]
    solve, (lo, hi) = REFERENCES[task_id]
    report = _grade(task, solve(train, test, task.public_dir), tmp_path)
    assert report["valid_submission"], report["message"]
    assert lo <= report["score"] <= hi, report
    better = report["score"] < sample["score"] if task.is_lower_better \
        else report["score"] > sample["score"]
    assert better, (report["score"], sample["score"])


@pytest.mark.parametrize("task_id", sorted(REFERENCES))
def test_layout_and_description(cache, task_id):
    task = tasks.get_task(task_id, cache_dir=cache)
    pub = task.public_dir
    for name in ("train.csv", "test.csv", "sample_submission.csv"):
        assert (pub / name).is_file()
    answers = pd.read_csv(task.private_dir / "answers.csv")
    test = pd.read_csv(pub / "test.csv")
    assert sorted(answers["id"].astype(str)) == sorted(test["id"].astype(str))
    assert not set(answers.columns[1:]) & set(test.columns)  # targets never in public test
    train_ids = set(pd.read_csv(pub / "train.csv")["id"].astype(str))
    assert not train_ids & set(test["id"].astype(str))
    text = task.description
    for needed in ("## Overview", "## Data", "## Evaluation", "./input/", "./submission.csv",
                   "better"):
        assert needed in text, needed
    assert task.timeout_s > 0 and task.memory_mb > 0 and task.reward_scale > 0


@pytest.mark.parametrize("task_id", sorted(REFERENCES))
def test_broken_submissions_are_invalid_with_reason(cache, task_id, tmp_path):
    task = tasks.get_task(task_id, cache_dir=cache)
    sample = pd.read_csv(task.public_dir / "sample_submission.csv")
    target = sample.columns[-1]
    broken = {
        "missing column": sample.drop(columns=target),
        "rows": sample.iloc[:-1],
        "do not match": sample.assign(id=[f"zz{k}" for k in range(len(sample))]),
    }
    if task.metric != "word_jaccard":  # an empty span is a valid (bad) prediction
        broken["NaN"] = sample.assign(**{target: np.nan})
    for reason, sub in broken.items():
        report = _grade(task, sub, tmp_path)
        assert not report["valid_submission"] and report["score"] is None, (reason, report)
        assert reason in report["message"], (reason, report["message"])
    missing = graders.grade_submission(task, tmp_path / "nowhere" / "submission.csv")
    assert not missing["valid_submission"] and "No submission file" in missing["message"]


def test_synth_boosting_beats_linear(cache):
    task = tasks.get_task("tabular-synth", cache_dir=cache)
    train, test = _read(task)
    answers = pd.read_csv(task.private_dir / "answers.csv")
    feats = [c for c in train.columns if c not in ("id", "target", "f_27")]
    lin = ref_synth(train, test, None)
    # Few trees on half the rows, to keep the test fast; more of both scores higher still.
    hgb = HistGradientBoostingClassifier(max_iter=60, early_stopping=False, random_state=0)
    hgb.fit(train[feats].iloc[:20000], train["target"].iloc[:20000])
    boosted = pd.DataFrame({"id": test["id"], "target": hgb.predict_proba(test[feats])[:, 1]})
    s_lin = task.grader(lin, answers)
    s_hgb = task.grader(boosted, answers)
    assert s_hgb > s_lin + 0.08, (s_lin, s_hgb)


# ----------------------------------------------------------------------------- registry


def test_unknown_task_names_id_and_known_ones(tmp_path):
    with pytest.raises(tasks.UnknownTask) as e:
        tasks.get_task("no-such-task", cache_dir=tmp_path)
    assert "no-such-task" in str(e.value) and "tabular-synth" in str(e.value)
    with pytest.raises(tasks.UnknownTask, match="mlebench prepare"):
        tasks.get_task("spooky-author-identification", cache_dir=tmp_path)
    with pytest.raises(tasks.UnknownTask):
        tasks.prepare("no-such-task", cache_dir=tmp_path)


def test_cache_dir_resolution(monkeypatch, tmp_path):
    assert tasks.cache_dir(tmp_path) == tmp_path
    monkeypatch.setenv("MLE_RL_CACHE", str(tmp_path / "env"))
    assert tasks.cache_dir() == tmp_path / "env"
    monkeypatch.delenv("MLE_RL_CACHE")
    assert tasks.cache_dir() == pathlib.Path.home() / ".cache" / "mle_rl"


def test_prepare_is_idempotent_and_rebuilds_stale(tmp_path):
    path = tasks.prepare("diabetes-progression", cache_dir=tmp_path)
    stamp = (path / "public" / "train.csv").stat().st_mtime_ns
    assert tasks.prepare("diabetes-progression", cache_dir=tmp_path) == path
    assert (path / "public" / "train.csv").stat().st_mtime_ns == stamp
    first = (path / "public" / "train.csv").read_bytes()
    marker = json.loads((path / tasks.MARKER).read_text())
    (path / tasks.MARKER).write_text(json.dumps({**marker, "version": -1}))  # an old builder
    (path / "public" / "train.csv").write_text("half written")
    assert tasks.prepare("diabetes-progression", cache_dir=tmp_path) == path
    assert (path / "public" / "train.csv").read_bytes() == first
    tasks.prepare("diabetes-progression", cache_dir=tmp_path, force=True)
    assert (path / "public" / "train.csv").read_bytes() == first  # deterministic
    leftovers = [p.name for p in (tmp_path / "tasks").iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_interrupted_prepare_leaves_nothing(tmp_path, monkeypatch):
    from mle_rl.env import builtin

    spec = builtin.SPECS["diabetes-progression"]

    def boom(root):
        (root / "public").mkdir()
        raise KeyboardInterrupt

    monkeypatch.setitem(builtin.SPECS, "diabetes-progression",
                        type(spec)(**{**spec.__dict__, "build": boom}))
    with pytest.raises(KeyboardInterrupt):
        tasks.prepare("diabetes-progression", cache_dir=tmp_path)
    assert list((tmp_path / "tasks").iterdir()) == []


def test_list_tasks_builtin(cache):
    rows = {r["id"]: r for r in tasks.list_tasks(cache_dir=cache)}
    assert set(rows) == set(tasks.BUILTIN_TASKS)
    assert rows["tabular-synth"] == {"id": "tabular-synth", "source": "builtin", "metric": "auc",
                                     "is_lower_better": False, "modality": "tabular",
                                     "prepared": True}
    modalities = {r["modality"] for r in rows.values()}
    assert modalities == {"tabular", "text", "image"}


def _fake_mlebench(root: pathlib.Path) -> pathlib.Path:
    """A tiny spooky-author-identification laid out as `mlebench prepare` leaves it."""
    task = root / "spooky-author-identification"
    pub, priv = task / "prepared" / "public", task / "prepared" / "private"
    pub.mkdir(parents=True)
    priv.mkdir(parents=True)
    (task / "description.md").write_text("# Spooky Author Identification\n")
    pd.DataFrame({"id": ["id1", "id2"], "text": ["a", "b"], "author": ["EAP", "MWS"]}) \
        .to_csv(pub / "train.csv", index=False)
    pd.DataFrame({"id": ["id7", "id8", "id9"], "text": ["c", "d", "e"]}).to_csv(
        pub / "test.csv", index=False)
    pd.DataFrame({"id": ["id7", "id8", "id9"], "EAP": [1, 0, 0], "HPL": [0, 1, 0],
                  "MWS": [0, 0, 1]}).to_csv(priv / "test.csv", index=False)
    (root / "not-a-competition" / "prepared" / "public").mkdir(parents=True)
    return root


def test_fake_mlebench_dir_is_found_and_graded(tmp_path):
    mle = _fake_mlebench(tmp_path / "mle")
    rows = [r for r in tasks.list_tasks(mlebench_dir=mle, cache_dir=tmp_path / "c")
            if r["source"] == "mlebench"]
    assert rows == [{"id": "spooky-author-identification", "source": "mlebench",
                     "metric": "multiclass_log_loss", "is_lower_better": True,
                     "modality": "text", "prepared": True}]
    task = tasks.get_task("spooky-author-identification", mlebench_dir=mle)
    assert task.root == mle / "spooky-author-identification" / "prepared"
    assert task.public_dir.is_dir() and task.private_dir.is_dir()
    assert task.description.startswith("# Spooky")
    sub = pd.DataFrame({"id": ["id9", "id8", "id7"], "EAP": [0.1, 0.2, 0.7],
                        "HPL": [0.1, 0.6, 0.2], "MWS": [0.8, 0.2, 0.1]})
    report = _grade(task, sub, tmp_path)
    assert report["valid_submission"], report["message"]
    assert report["score"] == pytest.approx(-np.mean(np.log([0.7, 0.6, 0.8])))
    bad = _grade(task, sub.drop(columns="HPL"), tmp_path)
    assert not bad["valid_submission"] and "HPL" in bad["message"]
    before = sorted(p.relative_to(mle) for p in mle.rglob("*"))
    tasks.get_task("spooky-author-identification", mlebench_dir=mle).description
    assert sorted(p.relative_to(mle) for p in mle.rglob("*")) == before  # nothing written


def test_mlebench_registry_covers_paper_tasks():
    from mle_rl.env import mlebench

    paper = {"detecting-insults-in-social-commentary": "auc", "random-acts-of-pizza": "auc",
             "tweet-sentiment-extraction": "word_jaccard",
             "tabular-playground-series-may-2022": "auc",
             "leaf-classification": "multiclass_log_loss",
             "nomad2018-predict-transparent-conductors": "rmsle_column_mean",
             "spooky-author-identification": "multiclass_log_loss",
             "lmsys-chatbot-arena": "multiclass_log_loss"}
    for task_id, metric in paper.items():
        assert mlebench.SPECS[task_id].metric == metric


def test_tasks_pickle_for_actor_processes(cache, tmp_path):
    import pickle

    task = tasks.get_task("penguin-island", cache_dir=cache)
    clone = pickle.loads(pickle.dumps(task))
    assert clone == task and clone.grader == task.grader
    mle = _fake_mlebench(tmp_path / "mle")
    remote = pickle.loads(pickle.dumps(tasks.get_task("spooky-author-identification",
                                                      mlebench_dir=mle)))
    assert remote.description.startswith("# Spooky")


def test_mlebench_description_in_public_dir(tmp_path):
    mle = _fake_mlebench(tmp_path / "mle")
    task_dir = mle / "spooky-author-identification"
    (task_dir / "description.md").rename(task_dir / "prepared" / "public" / "description.md")
    task = tasks.get_task("spooky-author-identification", mlebench_dir=mle)
    assert task.description.startswith("# Spooky")
    with pytest.raises(tasks.UnknownTask, match="not-a-competition"):
        tasks.get_task("not-a-competition", mlebench_dir=mle)
