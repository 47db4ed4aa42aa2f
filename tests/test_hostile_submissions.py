"""A hostile submission.csv, as a program in the sandbox could leave it, graded on the host.

Each case must come back invalid with one sentence, in bounded time and memory: never a
crash, a hang, a host file's content in the message, or a better-than-honest score. The
path a real action takes is `action.copy_submission` then `graders.grade_submission`;
`grade_submission` on the file in place must refuse the same things.
"""

import dataclasses
import os
import resource
import threading

import numpy as np
import pytest

from mle_rl.env import action, graders, submission_file
from mle_rl.env.graders import TableGrader
from mle_rl.env.types import InvalidSubmission
from tests._tiny_task import N_TEST, N_TRAIN, SECRET, make_tiny_task

IDS = list(range(N_TRAIN, N_TRAIN + N_TEST))
TRUTH = {i: int((-1) ** i * (i + 1) > 0) for i in IDS}
MiB = 2**20


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """The tiny task graded by accuracy on `y`, refusing columns other than id and y."""
    tiny = make_tiny_task(tmp_path_factory.mktemp("hostile"))
    return dataclasses.replace(tiny, grader=TableGrader("accuracy", "id", ("y",), header="exact"))


@pytest.fixture()
def workdir(tmp_path):
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


def _csv(rows, header="id,y") -> bytes:
    return (header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows)).encode()


HONEST = _csv([(i, TRUTH[i]) for i in IDS])


def _grade(task, path, tmp_path) -> dict:
    """What an action does: copy the file out of the work dir, then grade the copy."""
    copy = tmp_path / "copied.csv"
    why = action.copy_submission(path.parent, copy)
    if why is not None:
        return {"valid_submission": False, "score": None, "message": why}
    return graders.grade_submission(task, copy)


def _assert_refused(report, *words):
    assert not report["valid_submission"] and report["score"] is None, report
    msg = report["message"]
    assert msg and "\n" not in msg and len(msg) < 300, msg
    assert SECRET not in msg and "root:" not in msg, msg
    for w in words:
        assert w in msg, msg


def _both(task, path, tmp_path, *words):
    """Refused on the action's path and when graded in place."""
    _assert_refused(_grade(task, path, tmp_path), *words)
    _assert_refused(graders.grade_submission(task, path), *words)


def test_honest_submission_copies_and_scores_one(task, workdir, tmp_path):
    (workdir / "submission.csv").write_bytes(HONEST)
    copy = tmp_path / "copied.csv"
    assert action.copy_submission(workdir, copy) is None
    assert copy.read_bytes() == HONEST
    assert graders.grade_submission(task, copy)["score"] == 1.0


def test_missing_file(task, workdir, tmp_path):
    _both(task, workdir / "submission.csv", tmp_path, "no submission.csv")


@pytest.mark.parametrize("target", ["answers", "/etc/passwd"])
def test_symlink_is_not_followed(task, workdir, tmp_path, target):
    src = task.private_dir / "answers.csv" if target == "answers" else target
    os.symlink(src, workdir / "submission.csv")
    _both(task, workdir / "submission.csv", tmp_path, "symbolic link")


@pytest.mark.parametrize("target", ["answers", "outside"])
def test_hardlink_is_refused(task, workdir, tmp_path, target):
    if target == "answers":
        src = task.private_dir / "answers.csv"   # would score 1.0 if graded
    else:
        src = tmp_path / "outside.csv"
        src.write_bytes(HONEST)
    os.link(src, workdir / "submission.csv")
    _both(task, workdir / "submission.csv", tmp_path, "hard link")


def test_fifo_does_not_hang(task, workdir, tmp_path):
    os.mkfifo(workdir / "submission.csv")
    reports = []
    worker = threading.Thread(daemon=True, target=lambda: reports.extend([
        _grade(task, workdir / "submission.csv", tmp_path),
        graders.grade_submission(task, workdir / "submission.csv")]))
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "grading a FIFO blocked"
    for r in reports:
        _assert_refused(r, "FIFO")


def test_directory(task, workdir, tmp_path):
    (workdir / "submission.csv").mkdir()
    _both(task, workdir / "submission.csv", tmp_path, "directory")


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_huge_sparse_file_is_refused_unread(task, workdir, tmp_path):
    path = workdir / "submission.csv"
    path.write_bytes(HONEST)
    os.truncate(path, 64 * 2**30)   # 64 GiB of holes
    before = _peak_rss_mib()
    _both(task, path, tmp_path, "MiB limit")
    assert _peak_rss_mib() - before < 200


def _write_line(path, n_bytes: int, piece: bytes = b"1,") -> None:
    with open(path, "wb") as f:
        f.write(b"id,y\n")
        for _ in range(n_bytes // MiB):
            f.write(piece * (MiB // len(piece)))


def test_single_200_mb_line(task, workdir, tmp_path):
    path = workdir / "submission.csv"
    _write_line(path, 200 * MiB)
    before = _peak_rss_mib()
    _both(task, path, tmp_path, "MiB limit")        # over the tiny task's 16 MiB limit
    with pytest.raises(InvalidSubmission, match="a line (over|with over)"):
        graders.read_submission(path, max_bytes=submission_file.MAX_SUBMISSION_BYTES)
    assert _peak_rss_mib() - before < 200


def test_long_line_within_the_size_limit(task, workdir, tmp_path):
    path = workdir / "submission.csv"
    _write_line(path, 8 * MiB, b"x")
    _both(task, path, tmp_path, "line over")


def test_very_wide_table(task, workdir, tmp_path):
    path = workdir / "submission.csv"
    row = b",".join([b"1"] * 200_000) + b"\n"   # 400 KB lines: short enough, far too wide
    path.write_bytes(b"id,y\n" + row * 12)
    before = _peak_rss_mib()
    _both(task, path, tmp_path, "fields")
    assert _peak_rss_mib() - before < 200


def test_submission_limit_follows_the_answers():
    assert submission_file.submission_limit(__file__) == submission_file.MIN_LIMIT_BYTES
    assert submission_file.MIN_LIMIT_BYTES <= submission_file.MAX_SUBMISSION_BYTES


@pytest.mark.parametrize("name, content, words", [
    ("not utf-8", b"id,y\n40,\xff\xfe\n", ["UTF-8"]),
    ("nul bytes", b"id,y\n" + b"\x00" * 1000, []),
    ("empty", b"", ["empty"]),
    ("header only", b"id,y\n", ["no rows"]),
    ("NaN", _csv([(i, "" if i == IDS[0] else TRUTH[i]) for i in IDS]), ["missing"]),
    ("nan text", _csv([(i, "nan" if i == IDS[0] else TRUTH[i]) for i in IDS]), ["text"]),
    ("inf", _csv([(i, "inf" if i == IDS[0] else TRUTH[i]) for i in IDS]), ["whole-number"]),
    ("fraction", _csv([(i, 0.5) for i in IDS]), ["whole-number"]),
    ("text", _csv([(i, "yes") for i in IDS]), ["text"]),
    ("extra row", _csv([(i, TRUTH[i]) for i in IDS + IDS[:1]]), ["rows"]),
    ("duplicate id", _csv([(i, TRUTH[i]) for i in IDS[:1] + IDS[:1] + IDS[2:]]),
     ["do not match"]),
    ("missing id", _csv([(i, TRUTH[i]) for i in IDS[1:]]), ["rows"]),
    ("unknown id", _csv([(i + 1000, TRUTH[i]) for i in IDS]), ["do not match"]),
    ("ids as text", _csv([(f"id{i}", TRUTH[i]) for i in IDS]), ["do not match"]),
    ("wrong column", _csv([(i, TRUTH[i]) for i in IDS], "id,label"), ["missing column"]),
    ("extra column", _csv([(i, TRUTH[i], SECRET) for i in IDS], "id,y,note"), ["extra column"]),
    ("index column", _csv([(k, i, TRUTH[i]) for k, i in enumerate(IDS)], ",id,y"),
     ["index=False"]),
    ("ragged", HONEST + b"1,2,3,4\n", ["could not be read"]),
])
def test_malformed_content(task, workdir, tmp_path, name, content, words):
    path = workdir / "submission.csv"
    path.write_bytes(content)
    _both(task, path, tmp_path, *words)


def test_probabilities_must_sum_to_one(task, workdir, tmp_path):
    loss = dataclasses.replace(task, metric="multiclass_log_loss", is_lower_better=True,
                               grader=TableGrader("multiclass_log_loss", "id", ("0", "1"),
                                                  answer_label="y"))
    path = workdir / "submission.csv"
    honest = [(i, 1 - TRUTH[i], TRUTH[i]) for i in IDS]
    path.write_bytes(_csv(honest, "id,0,1"))
    score = graders.grade_submission(loss, path)["score"]
    assert score == pytest.approx(-np.log(1 - np.finfo(float).eps))
    for rows in ([(i, 0.3, 0.3) for i in IDS], [(i, 1.5, -0.5) for i in IDS],
                 [(i, 0.4975, 0.4975) for i in IDS]):
        path.write_bytes(_csv(rows, "id,0,1"))
        _both(loss, path, tmp_path)
