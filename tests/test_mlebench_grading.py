"""Our MLE-bench graders against MLE-bench's own grade.py, competition by competition.

tests/fixtures/mlebench holds a tiny synthetic prepared copy of each competition and a set
of submissions (perfect, random, sample, malformed); expected.json holds the verdict and
score MLE-bench's grade.py (commit 783b15a) gives each one. We must reject everything
MLE-bench rejects and match its score to 1e-6 wherever both accept, except for the
deliberate deviations recorded there (we refuse, or score by id / column name where
MLE-bench goes by position; mle_rl/env/GRADING.md). Regenerate with
tests/fixtures/make_mlebench_fixtures.py.
"""

import json
import pathlib

import pytest

from mle_rl.env import graders, mlebench, tasks

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "mlebench"
DOC = json.loads((FIXTURES / "expected.json").read_text())
EXPECTED = DOC["competitions"]
CASES = [(c, s) for c in sorted(EXPECTED) for s in sorted(EXPECTED[c])]


@pytest.fixture(scope="module")
def task_of():
    cache = {}

    def get(comp):
        if comp not in cache:
            cache[comp] = tasks.get_task(comp, mlebench_dir=FIXTURES)
        return cache[comp]
    return get


def test_fixtures_cover_every_mlebench_competition():
    assert "783b15a" in DOC["source"]
    without_grader = {"feedback-prize-english-language-learning"}   # not an MLE-bench task
    assert set(EXPECTED) == set(mlebench.SPECS) - without_grader
    assert set(mlebench.found_ids(FIXTURES)) == set(EXPECTED)
    size = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert size < 2**20


@pytest.mark.parametrize("comp,name", CASES)
def test_same_verdict_and_score_as_mlebench(task_of, comp, name):
    want = EXPECTED[comp][name]
    got = graders.grade_submission(task_of(comp), FIXTURES / comp / "submissions" / f"{name}.csv")
    ours = "valid" if got["valid_submission"] else "invalid"
    assert not got["valid_submission"] or want["valid"], "more lenient than MLE-bench"
    if not got["valid_submission"]:
        msg = got["message"]
        assert msg and "\n" not in msg and len(msg) < 400, msg
    deviation = want.get("deviation")
    if deviation is None:
        assert ours == ("valid" if want["valid"] else "invalid"), (got["message"], want)
        if want["valid"]:
            assert got["score"] == pytest.approx(want["score"], abs=1e-6)
    elif deviation["ours"] == "invalid":
        assert ours == "invalid", deviation
    else:
        other = deviation["ours"].removeprefix("same_as:")
        assert got["score"] == pytest.approx(EXPECTED[comp][other]["score"], abs=1e-6)
