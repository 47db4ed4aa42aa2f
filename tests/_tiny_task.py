"""A tiny task in the MLE-bench layout for the environment's tests (no network, no cache).

public/: train.csv (id, x, y), test.csv (id, x), sample_submission.csv (id, y);
private/answers.csv (id, y, note) whose `note` column holds `SECRET`, a token that must
never appear in a sandboxed program's output.
"""

import pathlib
import secrets

import pandas as pd

from mle_rl.env.types import InvalidSubmission, Task

SECRET = "SECRET-" + secrets.token_hex(6)
N_TRAIN, N_TEST = 40, 10


def accuracy_grader(sub: pd.DataFrame, answers: pd.DataFrame) -> float:
    if list(sub.columns) != ["id", "y"]:
        raise InvalidSubmission(f"Expected columns ['id', 'y'], got {list(sub.columns)}.")
    if len(sub) != len(answers) or set(sub.id) != set(answers.id):
        raise InvalidSubmission("The submission's ids do not match the test ids.")
    merged = answers.merge(sub, on="id", suffixes=("", "_pred"))
    return float((merged.y == merged.y_pred).mean())


def make_tiny_task(root: pathlib.Path, task_id: str = "tiny", **kw) -> Task:
    root = pathlib.Path(root) / task_id
    (root / "public").mkdir(parents=True)
    (root / "private").mkdir()
    (root / "description.md").write_text("# Tiny\nPredict y (0 or 1) from x; y = x > 0.\n")
    xs = [(-1) ** i * (i + 1) for i in range(N_TRAIN + N_TEST)]
    train = pd.DataFrame({"id": range(N_TRAIN), "x": xs[:N_TRAIN],
                          "y": [int(x > 0) for x in xs[:N_TRAIN]]})
    test_ids = range(N_TRAIN, N_TRAIN + N_TEST)
    test = pd.DataFrame({"id": test_ids, "x": xs[N_TRAIN:]})
    train.to_csv(root / "public" / "train.csv", index=False)
    test.to_csv(root / "public" / "test.csv", index=False)
    pd.DataFrame({"id": test_ids, "y": 0}).to_csv(root / "public" / "sample_submission.csv",
                                                  index=False)
    pd.DataFrame({"id": test_ids, "y": [int(x > 0) for x in xs[N_TRAIN:]],
                  "note": SECRET}).to_csv(root / "private" / "answers.csv", index=False)
    defaults = dict(metric="accuracy", is_lower_better=False, timeout_s=20.0, memory_mb=2048,
                    reward_scale=10.0)
    defaults.update(kw)
    return Task(id=task_id, root=root, grader=accuracy_grader, **defaults)


GOOD_CODE = """\
import pandas as pd
train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
pred = (test.x > 0).astype(int)
pd.DataFrame({"id": test.id, "y": pred}).to_csv("submission.csv", index=False)
"""
