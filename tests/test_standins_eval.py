"""The MLE-bench stand-ins through evaluate.py and launch/standins.sh's report: the sample
submission found under the names MLE-bench gives it, the per-program time limit, the table."""

import json
import os
import subprocess
import sys

import pytest

from mle_rl.agent.evaluation import sample_submission_file, sample_submission_score
from mle_rl.env import mlebench, standins

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments"))

import standins_report  # noqa: E402

IDS = ("random-acts-of-pizza", "detecting-insults-in-social-commentary",
       "statoil-iceberg-classifier-challenge", "us-patent-phrase-to-phrase-matching")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("standins")
    standins.build(out, ids=IDS)
    return out


@pytest.mark.parametrize("cid,name,where", [
    ("random-acts-of-pizza", "sampleSubmission.csv", "public"),
    ("detecting-insults-in-social-commentary", "sample_submission_null.csv", "public"),
    ("statoil-iceberg-classifier-challenge", "sample_submission.csv", "private"),
])
def test_the_sample_submission_under_its_competition_s_own_name(data, cid, name, where):
    task = mlebench.make_task(data, cid)
    path = sample_submission_file(task)
    assert path.name == name and path.parent.name == where
    score = sample_submission_score(task)
    assert score == pytest.approx(0.5 if cid != "statoil-iceberg-classifier-challenge"
                                  else 0.6931, abs=1e-3)


def test_a_sample_submission_the_grader_refuses_has_no_score(data):
    # us-patent's sample predicts 0 everywhere: Pearson's r is undefined
    task = mlebench.make_task(data, "us-patent-phrase-to-phrase-matching")
    assert sample_submission_file(task).name == "sample_submission.csv"
    assert sample_submission_score(task) is None


def _evaluate(*flags):
    return subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "evaluate.py"),
                           *flags], capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_evaluate_on_a_stand_in_with_a_time_limit_and_the_report(data, tmp_path):
    out = tmp_path / "eval"
    proc = _evaluate("--policy_dir=random", f"--mlebench_dir={data}",
                     "--tasks=random-acts-of-pizza", "--n=2", "--max_new_tokens=16",
                     "--max_prompt_tokens=1536",
                     "--num_actors=1", "--sample_batch=2", "--improve=false",
                     "--timeout_s=60", f"--cache_dir={tmp_path / 'cache'}", f"--out={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(out.with_suffix(".json").read_text())["random-acts-of-pizza"]
    assert row["n"] == 2 and row["sample_submission_score"] == pytest.approx(0.5)
    md = tmp_path / "report.md"
    assert standins_report.main([f"--eval={out.with_suffix('.json')}", f"--out={md}"]) == 0
    text = md.read_text()
    # every competition has a row; the one evaluated shows its valid count and its sample
    for cid in mlebench.SPECS:
        assert f"| {cid} |" in text
    assert f"| random-acts-of-pizza | text | auc ↑ | {row['valid']}/2 |" in text
    assert "| lmsys-chatbot-arena | text | multiclass_log_loss | not evaluated |" in text
    assert f"of {len(mlebench.SPECS)}** (target: 16)" in text
    # an earlier evaluation as a column
    assert standins_report.main([f"--eval={out.with_suffix('.json')}", f"--out={md}",
                                 f"--before={out.with_suffix('.json')}"]) == 0
    text = md.read_text()
    assert "| before: valid, best |" in text
    assert f"| {row['valid']}/2, " in text and "(before: " in text
    # the first report is kept below the second's marker
    assert text.count("## Evaluation of") == 2 and text.count("| before: valid, best |") == 1


def test_a_time_limit_that_is_not_positive_is_one_clear_error(data, tmp_path):
    proc = _evaluate("--policy_dir=random", f"--mlebench_dir={data}",
                     "--tasks=random-acts-of-pizza", "--n=1", "--timeout_s=0",
                     f"--cache_dir={tmp_path / 'cache'}")
    assert proc.returncode == 2
    assert "--timeout_s must be positive" in proc.stderr


def test_report_counts_a_refused_sample_as_beaten_by_any_valid_program():
    base = {"metric": "pearson", "is_lower_better": False, "n": 4, "failures": []}
    assert standins_report.beats({**base, "valid": 1, "best": 0.1,
                                  "sample_submission_score": None})
    assert not standins_report.beats({**base, "valid": 0, "best": None,
                                      "sample_submission_score": None})
    assert not standins_report.beats({**base, "valid": 2, "best": 0.4,
                                      "sample_submission_score": 0.5,
                                      "beats_sample_submission": False})
    why = standins_report.why({"statuses": {"ok": 1, "error": 3},
                               "failures": [{"message": "boom\nline 2"},
                                            {"message": "boom\nline 3"}, {"message": "x"}]})
    assert why == "error 3: e.g. boom"
