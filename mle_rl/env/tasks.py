"""The task registry: built-in offline tasks (prepared into a cache) and real MLE-bench tasks.

    prepare("tabular-synth")              -> ~/.cache/mle_rl/tasks/tabular-synth
    get_task("penguin-island")            -> Task (prepared on demand)
    get_task("spooky-author-identification", mlebench_dir="~/mlebench-data")
    get_task("my-task", task_dir="~/my_tasks")   -> a user task (task.json + prepared/)
    list_tasks(mlebench_dir=...)          -> [{"id", "source", "metric", ...}]
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
from typing import Optional

from mle_rl.env import builtin, mlebench, user_tasks
from mle_rl.env.builtin import SPECS as BUILTIN_SPECS
from mle_rl.env.types import Task

BUILTIN_TASKS: tuple = tuple(BUILTIN_SPECS)
MARKER = ".mle_rl_task.json"
FORMAT_VERSION = 1


class UnknownTask(ValueError):
    """A task id that is neither built in, nor a user task under --task_dir, nor a
    recognised MLE-bench task found on disk."""

    def __init__(self, task_id: str, mlebench_dir=None, task_dir=None):
        found = mlebench.found_ids(mlebench_dir)
        user = [t for d in task_dirs(task_dir) for t in user_tasks.task_ids(d)]
        known = list(BUILTIN_TASKS) + user + found
        where = f" or prepared under {mlebench_dir}" if mlebench_dir else \
            " (pass --mlebench_dir to use real MLE-bench tasks)"
        if task_dir:
            where += f", or user tasks under {task_dir}"
        msg = f"Unknown task '{task_id}'; known tasks{where}: {', '.join(known)}."
        if task_id in mlebench.SPECS:
            msg = (f"Task '{task_id}' is an MLE-bench task, but it is not prepared under "
                   f"{mlebench_dir or 'any --mlebench_dir'}; run `mlebench prepare -c {task_id}` "
                   f"and pass --mlebench_dir. Known tasks: {', '.join(known)}.")
        super().__init__(msg)
        self.task_id = task_id


def task_dirs(task_dir) -> list:
    """--task_dir as a list: None, one dir, a comma-separated string or a sequence."""
    if not task_dir:
        return []
    if isinstance(task_dir, (str, os.PathLike)):
        return [d for d in str(task_dir).split(",") if d]
    return [str(d) for d in task_dir if d]


def generated_dir(cache_dir=None) -> pathlib.Path:
    """Where the warm start writes its procedural tasks (searched after --task_dir)."""
    return globals()["cache_dir"](cache_dir) / "generated_tasks"


def cache_dir(explicit=None) -> pathlib.Path:
    """`explicit`, else $MLE_RL_CACHE, else ~/.cache/mle_rl."""
    if explicit is not None:
        return pathlib.Path(explicit).expanduser()
    env = os.environ.get("MLE_RL_CACHE")
    if env:
        return pathlib.Path(env).expanduser()
    return pathlib.Path.home() / ".cache" / "mle_rl"


@functools.lru_cache(maxsize=1)
def _builder_source_hash() -> str:
    """sha256 of the built-in builders' source, so any edit to them re-prepares the tasks."""
    digest = hashlib.sha256()
    for path in sorted(pathlib.Path(builtin.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _expected_marker(task_id: str) -> dict:
    return {"format": FORMAT_VERSION, "source": _builder_source_hash(),
            **BUILTIN_SPECS[task_id].fingerprint()}


def _is_current(root: pathlib.Path, task_id: str) -> bool:
    try:
        return json.loads((root / MARKER).read_text()) == _expected_marker(task_id)
    except (OSError, ValueError):
        return False


def prepare(task_id: str, cache_dir: Optional[os.PathLike] = None, force: bool = False) -> pathlib.Path:
    """Materializes built-in task `task_id` under `<cache>/tasks/<id>/`; returns that path.

    Idempotent: a copy whose marker matches the builder (its version and a hash of the
    builders' source) and the versions of the packages the data comes from is reused. A new copy is built in a temporary sibling directory and renamed into place, so
    an interrupted prepare never leaves a half-written task.
    """
    if task_id not in BUILTIN_SPECS:
        raise UnknownTask(task_id)
    base = globals()["cache_dir"](cache_dir) / "tasks"
    dest = base / task_id
    if not force and _is_current(dest, task_id):
        return dest
    base.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{task_id}.tmp-", dir=base))
    try:
        BUILTIN_SPECS[task_id].build(tmp)
        hide_private(tmp)
        (tmp / MARKER).write_text(json.dumps(_expected_marker(task_id), indent=1, sort_keys=True))
        if not force and _is_current(dest, task_id):  # another process finished first
            return dest
        if dest.exists():
            trash = pathlib.Path(tempfile.mkdtemp(prefix=f".{task_id}.old-", dir=base))
            os.rename(dest, trash / "task")
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not _is_current(dest, task_id):   # someone else won the race with a stale copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def hide_private(root: pathlib.Path) -> None:
    """Makes `root/private` 0700 (owner only): without bubblewrap's mount namespace
    (`--sandbox=unsafe`), a program running as another uid then cannot read the answers."""
    private = root / "private"
    if private.is_dir() and private.stat().st_mode & 0o077:
        os.chmod(private, 0o700)


def _builtin_task(task_id: str, root: pathlib.Path) -> Task:
    s = BUILTIN_SPECS[task_id]
    return Task(id=s.id, root=root, metric=s.metric, is_lower_better=s.is_lower_better,
                grader=s.grader, modality=s.modality, answers_file="answers.csv",
                timeout_s=float(s.timeout_s), memory_mb=int(s.memory_mb),
                reward_scale=float(s.reward_scale), source="builtin")


def get_task(task_id: str, mlebench_dir=None, cache_dir=None, task_dir=None) -> Task:
    """A built-in task (prepared on demand), a user task under `task_dir` (one dir, several
    comma-separated, or a list; then the warm start's generated tasks), or an MLE-bench
    task prepared under `mlebench_dir`. A user task that is not valid raises
    `user_tasks.TaskSpecError` (one line)."""
    if task_id in BUILTIN_SPECS:
        root = prepare(task_id, cache_dir=cache_dir)
        hide_private(root)
        return _builtin_task(task_id, root)
    for d in task_dirs(task_dir) + [str(generated_dir(cache_dir))]:
        if (pathlib.Path(d).expanduser() / task_id / user_tasks.SPEC_FILE).is_file():
            task = user_tasks.load(d, task_id)
            hide_private(task.root)
            return task
    if task_id in mlebench.SPECS and mlebench.prepared_root(mlebench_dir, task_id) is not None:
        return mlebench.make_task(mlebench_dir, task_id)
    raise UnknownTask(task_id, mlebench_dir, task_dir)


def list_tasks(mlebench_dir=None, cache_dir=None, task_dir=None) -> list[dict]:
    """[{"id", "source", "metric", "is_lower_better", "modality", "prepared"}]: built-ins,
    then user tasks under `task_dir` (each checked: a bad one raises TaskSpecError), then
    MLE-bench tasks."""
    out = []
    base = globals()["cache_dir"](cache_dir) / "tasks"
    for task_id, s in BUILTIN_SPECS.items():
        out.append({"id": task_id, "source": "builtin", "metric": s.metric,
                    "is_lower_better": s.is_lower_better, "modality": s.modality,
                    "prepared": _is_current(base / task_id, task_id)})
    for d in task_dirs(task_dir):
        for task_id in user_tasks.task_ids(d):
            t = user_tasks.load(d, task_id)
            out.append({"id": task_id, "source": "user", "metric": t.metric,
                        "is_lower_better": t.is_lower_better, "modality": t.modality,
                        "prepared": True})
    for task_id in mlebench.found_ids(mlebench_dir):
        s = mlebench.SPECS[task_id]
        out.append({"id": task_id, "source": "mlebench", "metric": s.metric,
                    "is_lower_better": s.is_lower_better, "modality": s.modality,
                    "prepared": True})
    return out
