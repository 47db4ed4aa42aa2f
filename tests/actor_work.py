"""Work functions and a parent script for tests/test_actors.py.

Actors import their work function by name, so these live in a module of their own.
`scripted_work` does what `request.meta["mode"]` says and records, in
`meta["record_dir"]/<request_id>.json`, its pid and when it started and ended.

Run as a script it is a small trainer stand-in: it starts a pool, prints one JSON line
(the actor pids, and what an actor sees as its `__main__` file), starts one long action
and waits, so a test can kill it.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import pandas as pd

from mle_rl.env.types import ActionResult, InvalidSubmission, Task


def _record(request, **fields) -> None:
    record_dir = request.meta.get("record_dir")
    if not record_dir:
        return
    path = pathlib.Path(record_dir) / f"{request.request_id}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(fields)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def scripted_work(request, ctx) -> ActionResult:
    """meta["mode"]: "sleep" (default; meta["sleep"] s), "exit" (os._exit(3)),
    "raise" (ValueError), "bad_return" (returns a string), "main_file" (__main__.__file__),
    "grandchild" (starts `sleep 600`, then sleeps)."""
    mode = request.meta.get("mode", "sleep")
    _record(request, pid=os.getpid(), actor_id=ctx.actor_id, start=time.time())
    if mode == "exit":
        os._exit(3)
    if mode == "raise":
        raise ValueError(f"boom from request {request.request_id}")
    if mode == "main_file":  # did spawn re-run the parent's main script in this actor?
        main_file = getattr(sys.modules["__main__"], "__file__", None)
        return ActionResult(status="ok", score=None, reward=0.0, duration_s=0.0,
                            message=str(main_file))
    if mode == "bad_return":
        return "not an ActionResult"
    if mode == "grandchild":  # like a sandbox: a process of its own, in the actor's group
        child = subprocess.Popen(["sleep", "600"])
        _record(request, grandchild=child.pid)
    seconds = float(request.meta.get("sleep", 0.0))
    time.sleep(seconds)
    ctx.cache["count"] = ctx.cache.get("count", 0) + 1
    _record(request, end=time.time())
    return ActionResult(
        status="ok", score=1.0, reward=1.0, duration_s=seconds,
        message=f"pid {os.getpid()} action {ctx.cache['count']} of this actor",
    )


# ---------------------------------------------------------------- a tiny real task

def accuracy_grader(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Accuracy of `label` joined on `id`; a module-level function so a Task pickles."""
    if list(submission.columns) != ["id", "label"]:
        raise InvalidSubmission(
            f"submission columns are {list(submission.columns)}; expected ['id', 'label']."
        )
    merged = answers.merge(submission, on="id", how="left", suffixes=("", "_pred"))
    if merged["label_pred"].isna().any():
        raise InvalidSubmission("the submission is missing some test ids.")
    return float((merged["label"] == merged["label_pred"]).mean())


def write_tiny_task(root: pathlib.Path) -> None:
    """Writes an MLE-bench-layout task: label = 1 if x > 0 else 0."""
    (root / "public").mkdir(parents=True)
    (root / "private").mkdir()
    (root / "description.md").write_text(
        "Predict `label` (0 or 1) from `x`. Write submission.csv with columns id,label.\n"
    )
    xs = [(-1) ** i * (i + 1) for i in range(40)]
    rows = [{"id": i, "x": x, "label": int(x > 0)} for i, x in enumerate(xs)]
    train, test = pd.DataFrame(rows[:30]), pd.DataFrame(rows[30:])
    train.to_csv(root / "public" / "train.csv", index=False)
    test[["id", "x"]].to_csv(root / "public" / "test.csv", index=False)
    test.assign(label=0)[["id", "label"]].to_csv(
        root / "public" / "sample_submission.csv", index=False)
    test[["id", "label"]].to_csv(root / "private" / "answers.csv", index=False)


def tiny_task(task_id: str, mlebench_dir=None, cache_dir=None) -> Task:
    """A `task_factory` for `_default_work`: the task lives at `mlebench_dir/task_id`."""
    return Task(
        id=task_id, root=pathlib.Path(mlebench_dir) / task_id, metric="accuracy",
        is_lower_better=False, grader=accuracy_grader, timeout_s=60.0, memory_mb=2048,
    )


def nan_reward_work(request, ctx) -> ActionResult:
    """A failed action whose reward is NaN when `ctx.work_kwargs["nan_every"]` divides its
    request id (every action with 1, none with 0): a broken reward reaching the learner."""
    every = int(ctx.work_kwargs.get("nan_every", 1))
    reward = float("nan") if every and request.request_id % every == 0 else -10.0
    return ActionResult(status="error", score=None, reward=reward, duration_s=0.05,
                        message="scripted")


def scored_work(request, ctx) -> ActionResult:
    """A valid action scored (request id mod 5) / 10, its reward the score: varied scores
    within every group."""
    score = (request.request_id % 5) / 10.0
    return ActionResult(status="ok", score=score, reward=score, duration_s=0.05,
                        message="scripted")


def scored_or_failed_work(request, ctx) -> ActionResult:
    """As `scored_work`, but every fifth request fails (reward -10): groups that mix
    failures and valid programs of varied scores."""
    if request.request_id % 5 == 0:
        return ActionResult(status="error", score=None, reward=-10.0, duration_s=0.05,
                            message="scripted failure")
    return scored_work(request, ctx)


# ---------------------------------------------------------------- trainer stand-in

def parent_main(num_actors: int, from_thread: bool) -> None:
    """`from_thread`: start the pool from a thread, where PR_SET_PDEATHSIG can't be used,
    so the actors' parent-watcher threads must notice the death."""
    from mle_rl.agent.actors import ActionRequest, ActorPool

    make = lambda: ActorPool(num_actors, work_fn="actor_work:scripted_work", preload=())  # noqa
    if from_thread:
        box = []
        thread = threading.Thread(target=lambda: box.append(make()))
        thread.start()
        thread.join()
        pool = box[0]
    else:
        pool = make()
    pool.submit(ActionRequest(0, "t", "", 0, "n", meta={"mode": "main_file"}))
    done = []
    while not done:
        done = pool.poll(timeout=1.0)
    pool.submit(ActionRequest(1, "t", "", 0, "n", meta={"sleep": 600}))
    pool.poll(timeout=0.5)
    print(json.dumps({"pids": sorted(pool.pids().values()),
                      "actor_main_file": done[0].result.message}), flush=True)
    while True:
        pool.poll(timeout=1.0)


if __name__ == "__main__":
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)   # a test may ask for stacks
    parent_main(int(sys.argv[1]), from_thread=sys.argv[2] == "thread")

