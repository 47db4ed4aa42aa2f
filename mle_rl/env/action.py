"""One action, end to end: response text -> parse -> instrument -> sandbox -> grade -> reward.

`run_action` never raises for bad model output: a response without code, with several
code blocks or a syntax error, a program that crashes, hangs, runs out of memory, or
writes no (or a malformed, or a symlinked) submission all come back as an `ActionResult`
with the matching status and the scheme's reward. The grader runs outside the sandbox on
a copy of `submission.csv` taken as a regular file (never following a link), so a program
cannot point the grader at the answers.
"""

from __future__ import annotations

import ast
import logging
import math
import pathlib
import shutil
import tempfile
from typing import Optional

from mle_rl.env import pysource
from mle_rl.env import instrument as instrument_lib
from mle_rl.env import janitor, prompts, rewards, sandbox, submission_file
from mle_rl.env.types import ActionResult, InvalidSubmission, Task

log = logging.getLogger(__name__)

SUBMISSION = "submission.csv"


# Metrics in the units of the target: rl4mle divides their scores by `score_scale`.
UNSCALED_METRICS = ("rmse", "mae", "mcrmse")
_SCALES: dict = {}


def score_scale(task: Task) -> float:
    """rl4mle's divisor for `task`'s scores: for a metric in the target's own units
    (`UNSCALED_METRICS`), the score of the task's public sample submission (an uninformed
    prediction: training mean or median), so rewards have the same scale on every task;
    1 for every other metric, and when that file is missing or not gradable. Cached per
    task directory."""
    if task.metric not in UNSCALED_METRICS:
        return 1.0
    key = (task.id, str(task.public_dir))
    if key not in _SCALES:
        from mle_rl.env import graders

        scale = 1.0
        path = task.public_dir / "sample_submission.csv"
        if path.is_file():
            try:
                report = graders.grade_submission(task, path)
                if report["valid_submission"] and math.isfinite(report["score"]) \
                        and report["score"] > 0:
                    scale = float(report["score"])
            except (OSError, ValueError):
                pass
        _SCALES[key] = scale
    return _SCALES[key]


def _reward(scheme: str, task: Task, status: str, score, n_hits: int, prev_score,
            changed: bool) -> float:
    return rewards.compute_reward(scheme, status=status, score=score,
                                  is_lower_better=task.is_lower_better, n_hits=n_hits,
                                  prev_score=prev_score, alpha=task.reward_scale,
                                  changed=changed,
                                  score_scale=score_scale(task) if scheme == "rl4mle" else 1.0)


def _same_program(a: Optional[str], b: str) -> bool:
    if a is None:
        return False
    try:
        return ast.dump(pysource.parse(a)) == ast.dump(pysource.parse(b))
    except (SyntaxError, ValueError):
        return a.strip() == b.strip()


def copy_submission(workdir: pathlib.Path, dest: pathlib.Path) -> Optional[str]:
    """Copies `workdir/submission.csv` to `dest` if it is a regular file of sane size.

    Returns None on success, else one sentence saying why not: no file, a symlink, a hard
    link (more than one name), a FIFO, device or directory, an empty file, or one over
    submission_file.MAX_SUBMISSION_BYTES (see submission_file.open_submission). Never
    follows a link and never blocks; copies in chunks and stops if the file grows past
    the limit.
    """
    limit = submission_file.MAX_SUBMISSION_BYTES
    try:
        with submission_file.open_submission(pathlib.Path(workdir) / SUBMISSION, limit) as src, \
                open(dest, "wb") as dst:
            submission_file.copy_bounded(src, dst, limit)
    except InvalidSubmission as e:
        return str(e)
    return None


def run_code(task: Task, code: str, *, plan: str = "", nonce: Optional[str] = None,
             instrumenter="ast", reward_scheme: str = "rl4mle",
             prev_score: Optional[float] = None, prev_code: Optional[str] = None,
             timeout_s: Optional[float] = None, memory_mb: Optional[int] = None, pool=None,
             keep_workdir: bool = False, workdir: Optional[pathlib.Path] = None,
             save_submission: Optional[pathlib.Path] = None,
             sandbox_kw: Optional[dict] = None) -> ActionResult:
    """Runs `code` as one action of `task` (no response parsing): instrument, sandbox,
    grade, reward.

    workdir: the program's working dir (default a fresh temp dir; deleted afterwards
    unless `keep_workdir`). save_submission: where to keep a copy of the graded
    submission. sandbox_kw: more `run_program` limits (cpu_s, max_file_mb, max_procs,
    max_output_bytes, env_threads).
    """
    if reward_scheme not in rewards.REWARDS:
        raise ValueError(f"Unknown reward scheme {reward_scheme!r}; use one of "
                         f"{sorted(rewards.REWARDS)}.")
    inst = instrument_lib.get_instrumenter(instrumenter)
    nonce = nonce or instrument_lib.new_nonce()
    inst_result = inst.instrument(code, nonce)
    if inst_result.fallback:
        log.info("instrumentation did not compile; running the original program")
    changed = not _same_program(prev_code, code)
    res = sandbox.run_program(inst_result.code, task.public_dir,
                              timeout_s=timeout_s or task.timeout_s,
                              memory_mb=memory_mb or task.memory_mb, pool=pool,
                              workdir=workdir, watch=instrument_lib.marker_prefix(nonce),
                              **(sandbox_kw or {}))
    hits = instrument_lib.match_hits("\n".join(res.watched), nonce)
    score, status, message = None, res.status, res.message
    try:
        if res.status == "ok":
            from mle_rl.env import graders

            # Under the janitor's root: removed even if this process is killed mid-grade.
            with tempfile.TemporaryDirectory(prefix="sub_", dir=janitor.temp_root()) as tmp:
                copied = pathlib.Path(tmp) / SUBMISSION
                why = copy_submission(res.workdir, copied)
                if why is None:
                    report = graders.grade_submission(task, copied)
                    if report["valid_submission"]:
                        score = float(report["score"])
                    else:
                        why = report["message"] or "The grader rejected the submission."
                    if save_submission is not None:
                        shutil.copyfile(copied, save_submission)
                if why is not None:
                    status, message = "invalid_submission", why
    finally:
        if not keep_workdir:
            sandbox.remove_workdir(res.workdir)
    reward = _reward(reward_scheme, task, status, score, len(hits), prev_score, changed)
    if keep_workdir:
        message = (message + " " if message else "") + f"Working directory kept: {res.workdir}"
    return ActionResult(status=status, score=score, reward=reward, duration_s=res.duration_s,
                        hits=hits, stdout_tail=res.stdout_tail, stderr_tail=res.stderr_tail,
                        plan=plan, code=code, message=message)


def run_action(task: Task, response_text: str, *, nonce: Optional[str] = None,
               instrumenter="ast", reward_scheme: str = "rl4mle",
               prev_score: Optional[float] = None, prev_code: Optional[str] = None,
               timeout_s: Optional[float] = None, memory_mb: Optional[int] = None,
               pool=None, keep_workdir: bool = False,
               save_submission: Optional[pathlib.Path] = None) -> ActionResult:
    """Parses the policy's response and runs its code as one action of `task`.

    Statuses: "no_code" (no python block), "bad_format" (several blocks, or a syntax
    error), else those of `run_code`. duration_s is 0 when nothing ran.
    """
    parsed = prompts.parse_response(response_text)
    if parsed.status != "ok":
        status = "no_code" if parsed.status == "no_code" else "bad_format"
        reward = _reward(reward_scheme, task, status, None, 0, prev_score, True)
        return ActionResult(status=status, score=None, reward=reward, duration_s=0.0,
                            plan=parsed.plan, code=parsed.code, message=parsed.message)
    return run_code(task, parsed.code, plan=parsed.plan, nonce=nonce, instrumenter=instrumenter,
                    reward_scheme=reward_scheme, prev_score=prev_score, prev_code=prev_code,
                    timeout_s=timeout_s, memory_mb=memory_mb, pool=pool,
                    keep_workdir=keep_workdir, save_submission=save_submission)
