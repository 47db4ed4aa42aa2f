"""Command line: `python -m mle_rl tasks | prepare | exec | grade`.

Each command prints exactly one JSON object on stdout. `exec` refuses (exit 2, before
running anything) when bubblewrap does not work here, unless `--sandbox=unsafe` opts in. On bad input (an unknown task, a
missing, empty or non-UTF-8 file, a bad flag) it prints one sentence on stderr, the same
sentence as `{"error": ...}` on stdout, and exits with status 2.

    python -m mle_rl tasks [--mlebench_dir D] [--task_dir DIR]
    python -m mle_rl prepare --task T [--cache_dir C] [--force]
    python -m mle_rl exec --task T --code FILE [--instrument ast|lm|none] [--timeout_s S]
                          [--memory_mb M] [--reward rl4mle|mlagent] [--mlebench_dir D]
                          [--sandbox bwrap|unsafe]
    python -m mle_rl grade --task T --submission FILE [--mlebench_dir D]
"""

from __future__ import annotations

import argparse
import json
import logging
import pathlib
import sys
from typing import Optional, Sequence

DEFAULT_TASK = "tabular-synth"


class UsageError(Exception):
    """Bad input from the person at the terminal; the message is one sentence."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not a usage block
        cmd = " ".join(self.prog.split()[1:])
        raise UsageError(f"{message} (see `python -m mle_rl {cmd + ' ' if cmd else ''}--help`).")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="mle_rl", description="mle_rl environment commands; one JSON object out.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    sub.required = True

    def common(sp, task=True):
        if task:
            sp.add_argument("--task", default=DEFAULT_TASK, help="task id (see `tasks`)")
        sp.add_argument("--mlebench_dir", default=None, help="dir of prepared MLE-bench tasks")
        sp.add_argument("--cache_dir", default=None, help="where built-in tasks are prepared")
        sp.add_argument("--task_dir", default=None,
                        help="dir(s, comma-separated) of user tasks: DIR/<id>/task.json + "
                             "DIR/<id>/prepared/{public,private}")

    common(sub.add_parser("tasks", help="list the tasks"), task=False)
    sp = sub.add_parser("prepare", help="materialize a built-in task")
    common(sp)
    sp.add_argument("--force", action="store_true", help="rebuild even if present")
    sp = sub.add_parser("exec", help="run one program as an action")
    common(sp)
    sp.add_argument("--code", required=True, help="the Python file to run")
    sp.add_argument("--instrument", default="ast", choices=("ast", "lm", "none"))
    sp.add_argument("--timeout_s", type=float, default=None, help="wall-time limit (task's)")
    sp.add_argument("--memory_mb", type=int, default=None, help="memory limit (task's)")
    sp.add_argument("--reward", default="rl4mle", choices=("rl4mle", "mlagent"))
    sp.add_argument("--keep_workdir", action="store_true", help="keep the program's cwd")
    sp.add_argument("--sandbox", default=None, choices=("bwrap", "unsafe"),
                    help="isolation (default $MLE_RL_SANDBOX, else bwrap; without it: refuse)")
    sp = sub.add_parser("grade", help="grade a submission file")
    common(sp)
    sp.add_argument("--submission", required=True, help="the submission CSV")
    return p


def _read_code(path: str) -> str:
    p = pathlib.Path(path)
    if not p.is_file():
        raise UsageError(f"Code file {path} does not exist; pass an existing .py file to --code.")
    data = p.read_bytes()
    if not data.strip():
        raise UsageError(f"Code file {path} is empty; write a Python program in it.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"Code file {path} is not UTF-8 text (bad byte at offset {e.start}); "
                         "save it as UTF-8.") from None


def _task(args):
    from mle_rl.env import tasks

    try:
        task = tasks.get_task(args.task, mlebench_dir=args.mlebench_dir, cache_dir=args.cache_dir,
                              task_dir=args.task_dir)
    except (tasks.UnknownTask, tasks.user_tasks.TaskSpecError) as e:
        raise UsageError(str(e) if str(e) else f"Unknown task {args.task!r}; run "
                         "`python -m mle_rl tasks` to list them.") from None
    if not task.public_dir.is_dir():
        raise UsageError(f"Task {task.id!r} is not prepared ({task.public_dir} is missing); run "
                         f"`python -m mle_rl prepare --task {task.id}`.")
    return task


def _run(args) -> dict:
    if args.command == "tasks":
        from mle_rl.env import tasks

        try:
            return {"tasks": tasks.list_tasks(mlebench_dir=args.mlebench_dir,
                                              cache_dir=args.cache_dir, task_dir=args.task_dir)}
        except tasks.user_tasks.TaskSpecError as e:
            raise UsageError(str(e)) from None
    if args.command == "prepare":
        from mle_rl.env import tasks

        if args.task not in tasks.BUILTIN_TASKS:   # a user or MLE-bench task: check it
            return {"task": args.task, "path": str(_task(args).root)}
        try:
            path = tasks.prepare(args.task, cache_dir=args.cache_dir, force=args.force)
        except tasks.UnknownTask as e:
            raise UsageError(str(e)) from None
        return {"task": args.task, "path": str(path)}
    if args.command == "exec":
        code = _read_code(args.code)
        if args.instrument == "lm":
            raise UsageError("--instrument lm needs a frozen policy checkpoint, which this "
                             "command cannot load yet; use --instrument ast or none.")
        if args.timeout_s is not None and args.timeout_s <= 0:
            raise UsageError(f"--timeout_s must be positive, got {args.timeout_s}.")
        if args.memory_mb is not None and args.memory_mb <= 0:
            raise UsageError(f"--memory_mb must be positive, got {args.memory_mb}.")
        task = _task(args)
        from mle_rl.env import action, isolation

        try:
            if args.sandbox:
                isolation.set_mode(args.sandbox)
            isolation.require()
        except isolation.SandboxUnavailable as e:
            raise UsageError(str(e)) from None
        result = action.run_code(task, code, instrumenter=args.instrument,
                                 reward_scheme=args.reward, timeout_s=args.timeout_s,
                                 memory_mb=args.memory_mb, keep_workdir=args.keep_workdir)
        return {"task": task.id, **result.to_json(), "sandbox": isolation.describe()}
    if args.command == "grade":
        sub = pathlib.Path(args.submission)
        if not sub.is_file():
            raise UsageError(f"Submission file {sub} does not exist; pass a CSV to --submission.")
        task = _task(args)
        from mle_rl.env import graders

        return graders.grade_submission(task, sub)
    raise UsageError(f"Unknown command {args.command!r}.")


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        out = _run(_parser().parse_args(argv))
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        print(json.dumps({"error": str(e)}))
        return 2
    except FileNotFoundError as e:
        msg = f"{e}" if str(e) else "A file the command needs is missing."
        print(f"error: {msg}", file=sys.stderr)
        print(json.dumps({"error": msg}))
        return 2
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
