"""Bring your own task: `--task_dir=DIR` with `DIR/<id>/task.json` beside the MLE-bench
layout. A valid task lists, grades and runs like a built-in one; a bad task.json gets one
clear line and exit 2."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from mle_rl.env import action, tasks, user_tasks

REPO = pathlib.Path(__file__).resolve().parents[1]


def write_task(base: pathlib.Path, task_id: str = "my-churn", metric: str = "auc",
               spec: dict = None) -> pathlib.Path:
    """A small binary task in the documented layout (the README's example)."""
    root = base / task_id
    public, private = root / "prepared" / "public", root / "prepared" / "private"
    public.mkdir(parents=True)
    private.mkdir()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = (x[:, 0] + 0.5 * rng.normal(size=200) > 0).astype(int)
    df = pd.DataFrame({"customer": np.arange(1000, 1200), "a": x[:, 0], "b": x[:, 1],
                       "c": x[:, 2], "churned": y})
    df[:150].to_csv(public / "train.csv", index=False)
    df[150:].drop(columns="churned").to_csv(public / "test.csv", index=False)
    df[150:][["customer"]].assign(churned=0.5).to_csv(public / "sample_submission.csv",
                                                      index=False)
    df[150:][["customer", "churned"]].to_csv(private / "answers.csv", index=False)
    (public / "description.md").write_text("# Churn\n\nPredict whether a customer churned.\n")
    (root / "task.json").write_text(json.dumps(spec or {
        "metric": metric, "id_column": "customer", "target_columns": ["churned"]}))
    return root


def cli(*args, tmp_path):
    return subprocess.run([sys.executable, "-m", "mle_rl", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "MLE_RL_CACHE": str(tmp_path / "cache"),
                               "PYTHONPATH": str(REPO), "HOME": str(tmp_path)})


def test_a_user_task_lists_grades_and_runs(tmp_path):
    write_task(tmp_path / "mine")
    listed = cli("tasks", "--task_dir", str(tmp_path / "mine"), tmp_path=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = [t for t in json.loads(listed.stdout)["tasks"] if t["source"] == "user"]
    assert rows == [{"id": "my-churn", "source": "user", "metric": "auc",
                     "is_lower_better": False, "modality": "tabular", "prepared": True}]
    task = tasks.get_task("my-churn", task_dir=str(tmp_path / "mine"))
    assert task.description.startswith("# Churn") and task.source == "user"
    assert (task.private_dir.stat().st_mode & 0o077) == 0   # hidden from other uids
    sample = task.public_dir / "sample_submission.csv"
    graded = cli("grade", "--task", "my-churn", "--task_dir", str(tmp_path / "mine"),
                 "--submission", str(sample), tmp_path=tmp_path)
    assert json.loads(graded.stdout)["score"] == 0.5
    code = ("import pandas as pd\n"
            "test = pd.read_csv('input/test.csv')\n"
            "pd.DataFrame({'customer': test.customer, 'churned': (test.a > 0) * 1.0})"
            ".to_csv('submission.csv', index=False)\n")
    res = action.run_code(task, code, instrumenter="none")
    assert res.status == "ok" and res.score > 0.75


@pytest.mark.parametrize("damage, said", [
    (lambda r: (r / "task.json").write_text("{not json"), "not valid JSON"),
    (lambda r: (r / "task.json").write_text(json.dumps(
        {"metric": "f1_macro", "id_column": "customer", "target_columns": ["churned"]})),
     "unknown metric 'f1_macro'"),
    (lambda r: (r / "task.json").write_text(json.dumps(
        {"metric": "auc", "id_column": "customer", "target_columns": ["left"]})),
     "lacks column(s) ['left']"),
    (lambda r: (r / "task.json").write_text(json.dumps(
        {"metric": "auc", "id_column": "customer", "target_columns": ["churned"],
         "lower_is_better": True})), "higher-is-better"),
    (lambda r: pd.read_csv(r / "prepared/private/answers.csv")[5:].to_csv(
        r / "prepared/private/answers.csv", index=False), "does not hold exactly the ids"),
    (lambda r: (r / "prepared/public/sample_submission.csv").unlink(),
     "sample_submission.csv is missing"),
    (lambda r: ((r / "prepared/public/test.csv").unlink(),    # no test.csv: the sample's ids
                pd.read_csv(r / "prepared/private/answers.csv")[5:].to_csv(
                    r / "prepared/private/answers.csv", index=False)),
     "does not hold exactly the ids of sample_submission.csv"),
], ids=["json", "metric", "column", "direction", "answer-ids", "file", "no-test-file"])
def test_a_bad_task_is_one_line_and_exit_2(tmp_path, damage, said):
    damage(write_task(tmp_path / "mine"))
    commands = [("tasks",)]
    if said.startswith("unknown metric"):   # every command checks the task the same way
        commands += [("exec", "--task", "my-churn", "--code", __file__),
                     ("grade", "--task", "my-churn", "--submission", __file__)]
    for args in commands:
        proc = cli(*args, "--task_dir", str(tmp_path / "mine"), tmp_path=tmp_path)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], (args, proc.stderr)


def test_an_unknown_task_names_the_user_tasks(tmp_path):
    write_task(tmp_path / "mine")
    with pytest.raises(tasks.UnknownTask, match="my-churn"):
        tasks.get_task("nope", task_dir=str(tmp_path / "mine"))
    with pytest.raises(user_tasks.TaskSpecError, match="not a directory"):
        tasks.get_task("nope", task_dir=str(tmp_path / "missing"))


def test_several_task_dirs(tmp_path):
    write_task(tmp_path / "a", "first")
    write_task(tmp_path / "b", "second", metric="binary_log_loss")
    dirs = f"{tmp_path / 'a'},{tmp_path / 'b'}"
    ids = [t["id"] for t in tasks.list_tasks(task_dir=dirs) if t["source"] == "user"]
    assert ids == ["first", "second"]
    assert tasks.get_task("second", task_dir=dirs).is_lower_better


def test_run_py_trains_on_a_user_task(tmp_path):
    """experiments/run.py --task_dir: the actors find the user's task, its programs are
    graded against its answers, and updates happen (a random micro policy: the scores are
    not the point)."""
    write_task(tmp_path / "mine")
    env = {"PATH": "/usr/bin:/bin", "MLE_RL_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": str(REPO), "HOME": str(tmp_path), "JAX_PLATFORMS": "cpu"}
    work = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "experiments/run.py", "--tasks=my-churn",
         f"--task_dir={tmp_path / 'mine'}", "--policy_dir=random", "--model_preset=micro",
         "--batch_size=2", "--sample_batch=2", "--max_in_flight=2", "--num_actors=1",
         "--critic=shared", "--max_new_tokens=8", "--max_prompt_tokens=1536",
         "--warm_pool=false", "--max_steps=1", f"--workdir={work}"],
        capture_output=True, text=True, cwd=REPO, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(l) for l in (work / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("step") == 1 for r in rows), rows[-1:]
    proc = subprocess.run([sys.executable, "experiments/run.py", "--tasks=my-churn",
                           f"--workdir={tmp_path / 'bad'}", "--policy_dir=random"],
                          capture_output=True, text=True, cwd=REPO, timeout=300, env=env)
    assert proc.returncode == 2 and "my-churn" in proc.stderr.strip().splitlines()[-1]
