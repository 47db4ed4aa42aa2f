"""Best-of-N evaluation, as in the RL-for-MLE paper's test protocol, and best@k curves.

Per task: `n_solve` samples solve from scratch (default: half, or all with
`improve=False`); the others (in rounds) improve the best valid solution found so far,
shown with its terminal output. The best valid score over all N is reported
(direction-aware), with the valid fraction and the model families used. With `n_solve`
one sampling batch, the rest is an AIDE-style greedy search: draft once, then keep
improving the best program so far.

Every sample's score is kept, so best@k (`best_at_k.py`: the unbiased estimate of the
expected best of k draws) is computed for k = 1, 2, 4, ..., over the *solve* samples only:
they are i.i.d. draws of the policy, the improve samples are not.
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import time
from typing import Optional

import jax
import numpy as np

from mle_rl import sampling
from mle_rl.agent import best_at_k as bak
from mle_rl.agent.actors import ActionRequest, ActorPool
from mle_rl.agent.prompt_sources import signed
from mle_rl.env import families, prompts as env_prompts, rewards as env_rewards
from mle_rl.env.instrument import new_nonce
from mle_rl.io import policy


@dataclasses.dataclass
class TaskResult:
    task_id: str
    metric: str
    is_lower_better: bool
    n: int = 0
    valid: int = 0
    best: Optional[float] = None
    best_mode: str = ""
    best_code: str = ""
    families: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    rewards: list = dataclasses.field(default_factory=list)
    baseline: Optional[float] = None   # the score of public/sample_submission.csv
    statuses: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    failures: list = dataclasses.field(default_factory=list)   # a few (status, message, code)
    samples: list = dataclasses.field(default_factory=list)    # per program, in finishing order

    def record(self, mode: str, r, response: str) -> bool:
        """Counts one finished program (an ``ActionResult``) drawn in ``mode``; True when it
        is the best so far. Valid means graded as the reward grades it
        (``env.rewards.graded``: status ``ok`` and a finite score), so a NaN score is a failure
        here as in training and never enters best@k."""
        self.n += 1
        self.rewards.append(r.reward)
        family = families.primary_family(r.code)
        self.families[family] += 1
        self.statuses[r.status] += 1
        ok = env_rewards.graded(r.status, r.score)
        self.samples.append({"mode": mode, "family": family,
                             "score": float(r.score) if ok else None,
                             "status": r.status, "duration_s": round(r.duration_s, 3)})
        if r.status != "ok" and len(self.failures) < 3:
            self.failures.append({"status": r.status, "message": r.message,
                                  "stderr_tail": r.stderr_tail[-600:],
                                  "response": response[-2000:]})
        if not ok:
            return False
        self.valid += 1
        if self.best is not None and signed(r.score, self.is_lower_better) <= signed(
                self.best, self.is_lower_better):
            return False
        self.best, self.best_mode, self.best_code = float(r.score), mode, r.code
        return True

    def solve_scores(self) -> list:
        """Raw scores of the solve samples (None = invalid): the i.i.d. draws."""
        return [x["score"] for x in self.samples if x["mode"] == "solve"]

    def best_at_k(self, ks=None, floor=None) -> dict:
        scores = self.solve_scores()
        return bak.best_at_k(scores, ks or bak.powers_of_two(len(scores)),
                             is_lower_better=self.is_lower_better, floor=floor,
                             baseline=self.baseline)

    @property
    def score_mean_valid(self) -> Optional[float]:
        v = [x["score"] for x in self.samples if x["score"] is not None]
        return float(np.mean(v)) if v else None

    @property
    def beats_baseline(self) -> Optional[bool]:
        if self.best is None or self.baseline is None:
            return None if self.baseline is None else False
        return signed(self.best, self.is_lower_better) > signed(self.baseline,
                                                                self.is_lower_better)

    @property
    def valid_frac(self) -> float:
        return self.valid / max(self.n, 1)

    def valid_by_mode(self) -> dict:
        """mode ("solve", "improve") -> [valid programs, programs]: a policy that writes
        valid programs only when shown one differs from one that writes them unprompted."""
        out: dict = {}
        for x in self.samples:
            v = out.setdefault(x["mode"], [0, 0])
            v[0] += x["score"] is not None
            v[1] += 1
        return out

    def valid_text(self) -> str:
        """'7/32', or 'solve 3/16, improve 4/16' when there are improve samples."""
        by = self.valid_by_mode()
        if set(by) <= {"solve"}:
            return f"{self.valid}/{self.n}"
        return ", ".join(f"{m} {v}/{n}" for m, (v, n) in sorted(by.items(), reverse=True))


def _run_round(pool: ActorPool, model, tokenizer, task, texts, modes, prevs, *, key,
               cfg: dict, result: TaskResult, start_id: int):
    ids = [policy.encode_prompt(tokenizer, t) for t in texts]
    out = sampling.generate(model, ids, max_new_tokens=cfg["max_new_tokens"], rng=key,
                            temperature=cfg["temperature"], top_p=cfg["top_p"],
                            eos_ids=policy.eos_ids(tokenizer, model.config),
                            pad_id=policy.pad_id(tokenizer), mesh=cfg.get("mesh"))
    for i in range(len(texts)):
        resp = policy.decode_response(tokenizer, out.tokens[i, :int(out.lengths[i])])
        prev = prevs[i]
        pool.submit(ActionRequest(request_id=start_id + i, task_id=task.id, response=resp,
                                  policy_version=0, nonce=new_nonce(),
                                  prev_score=prev["score"] if prev else None,
                                  prev_code=prev["code"] if prev else None))
    pending = set(range(start_id, start_id + len(texts)))
    best_entry = None
    while pending:
        for done in pool.poll(timeout=0.5):
            if done.request.request_id not in pending:
                continue
            pending.discard(done.request.request_id)
            mode = modes[done.request.request_id - start_id]
            r = done.result
            if result.record(mode, r, done.request.response):
                best_entry = {"plan": r.plan, "code": r.code, "output": r.stdout_tail,
                              "score": float(r.score)}
    return best_entry


class PromptBudgetError(ValueError):
    """--max_prompt_tokens cannot hold a task's prompt instructions."""


def sample_submission_file(task) -> Optional[pathlib.Path]:
    """The task's sample submission: public `sample_submission.csv`, else the one public CSV
    whose name says sample submission in another spelling (`sampleSubmission.csv`,
    `sample_submission_null.csv`), else private `sample_submission.csv` (one competition,
    statoil-iceberg, keeps it there), else None."""
    path = task.public_dir / "sample_submission.csv"
    if path.is_file():
        return path
    named = sorted(p for p in task.public_dir.glob("*.csv")
                   if p.stem.lower().replace("_", "").startswith("samplesubmission"))
    if named:
        return named[0]
    private = task.root / "private" / "sample_submission.csv"
    return private if private.is_file() else None


def sample_submission_score(task) -> Optional[float]:
    """The score of the task's own sample submission (the uninformed baseline)."""
    from mle_rl.env import graders

    path = sample_submission_file(task)
    if path is None:
        return None
    report = graders.grade_submission(task, path)
    return float(report["score"]) if report["valid_submission"] else None


def best_of_n(model, tokenizer, tasks: dict, n: int, *, improve: bool = True,
              n_solve: Optional[int] = None, seed: int = 0,
              num_actors: int = 2, temperature: float = 0.7, top_p: float = 1.0,
              max_prompt_tokens: int = 768, max_new_tokens: int = 512, sample_batch: int = 8,
              instrument: str = "ast", reward: str = "rl4mle", cache_dir=None,
              mlebench_dir=None, task_dir=None, warm_pool: bool = True, mesh=None,
              trained_budgets: Optional[dict] = None, log=print) -> dict:
    """-> {task_id: TaskResult}. `tasks` maps ids to `Task`s. `n_solve`: how many samples
    solve from scratch (default n // 2, or n without `improve`). `trained_budgets`
    (`warmstart.states.trained_prompt_budgets`) caps the solve / improve prompts at the
    lengths the policy was fine-tuned on."""
    solve_tokens = min(max_prompt_tokens, (trained_budgets or {}).get("solve", max_prompt_tokens))
    improve_tokens = min(max_prompt_tokens,
                         (trained_budgets or {}).get("improve", max_prompt_tokens))
    count = lambda s: len(policy.encode_prompt(tokenizer, s))  # noqa: E731
    cfg = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, mesh=mesh)
    key = jax.random.key(seed)
    work = dict(mlebench_dir=mlebench_dir, cache_dir=cache_dir, task_dir=task_dir,
                instrumenter=instrument,
                reward_scheme=reward, warm_pool={"size": 1} if warm_pool else None)
    timeouts = {tid: t.timeout_s for tid, t in tasks.items()}
    try:       # before any actor starts: a budget too small for the instructions is bad input
        solves = {tid: env_prompts.solve_prompt(task, max_tokens=solve_tokens, count_tokens=count)
                  for tid, task in tasks.items()}
    except ValueError as e:
        raise PromptBudgetError(str(e)) from None
    results = {}
    with ActorPool(num_actors, work_kwargs=work,
                   action_timeout_s=lambda r: timeouts[r.task_id]) as pool:
        next_id = 0
        for tid, task in tasks.items():
            res = TaskResult(tid, task.metric, task.is_lower_better,
                             baseline=sample_submission_score(task))
            if n_solve is None:
                n_solve = n // 2 if improve else n
            solve = solves[tid]
            best_entry = None
            done_n = 0
            t0 = time.monotonic()
            while done_n < n:
                # Solve rounds until n_solve are done; then improve the best so far (or keep
                # solving while nothing valid has been found).
                left = (n_solve - done_n) if done_n < n_solve else (n - done_n)
                k = min(sample_batch, left)
                if done_n < n_solve or best_entry is None:
                    texts, modes, prevs = [solve] * k, ["solve"] * k, [None] * k
                else:
                    text = env_prompts.improve_prompt(
                        task, best_entry["plan"], best_entry["code"], best_entry["output"],
                        max_tokens=improve_tokens, count_tokens=count)
                    texts, modes, prevs = [text] * k, ["improve"] * k, [best_entry] * k
                key, sub = jax.random.split(key)
                found = _run_round(pool, model, tokenizer, task, texts, modes, prevs, key=sub,
                                   cfg=cfg, result=res, start_id=next_id)
                next_id += k
                done_n += k
                if found is not None:
                    best_entry = found
                if progress_due(done_n - k, done_n, n):   # long searches say where they are
                    log(f"[eval] {tid}: {done_n}/{n} programs, valid {res.valid}, "
                        f"best {_fmt(res.best)}, {time.monotonic() - t0:.0f} s")
            results[tid] = res
            log(f"[eval] {tid}: best {res.best} ({res.metric}, "
                f"{'lower' if res.is_lower_better else 'higher'} is better), "
                f"valid {res.valid}/{res.n}, families {dict(res.families)}")
    return results


def progress_due(before: int, after: int, n: int, parts: int = 10) -> bool:
    """Whether a round that took the count of programs run from `before` to `after` (of `n`)
    crossed one of the `parts` equal steps: about `parts` progress lines per task, the last
    step left to the task's final line."""
    return 0 < after < n and after * parts // n > before * parts // n


def _fmt(x) -> str:
    return "—" if x is None else f"{x:.4f}"


def markdown_table(results: dict, label: str = "ours") -> str:
    lines = [f"| task | metric | best-of-N ({label}) | sample submission | valid | N "
             f"| mean valid score | families |", "|---|---|---|---|---|---|---|---|"]
    for tid, r in results.items():
        arrow = "↓" if r.is_lower_better else "↑"
        fams = ", ".join(f"{k} {v}" for k, v in r.families.most_common())
        lines.append(f"| {tid} | {r.metric} {arrow} | {_fmt(r.best)} | {_fmt(r.baseline)} "
                     f"| {r.valid_text()} | {r.n} | {_fmt(r.score_mean_valid)} | {fams} |")
    curves = {tid: r.best_at_k() for tid, r in results.items()}
    ks = sorted({k for c in curves.values() for k in c})
    if ks:
        lines += ["", "best@k over the solve samples (expected best of k draws; an invalid "
                  "program counts as the sample submission):", "",
                  "| task | " + " | ".join(f"@{k}" for k in ks) + " |",
                  "|---|" + "---|" * len(ks)]
        for tid, c in curves.items():
            lines.append(f"| {tid} | " + " | ".join(_fmt(c.get(k)) for k in ks) + " |")
    return "\n".join(lines)


def results_to_json(results: dict) -> dict:
    return {tid: {"metric": r.metric, "is_lower_better": r.is_lower_better, "n": r.n,
                  "valid": r.valid, "best": r.best, "best_mode": r.best_mode,
                  "sample_submission_score": r.baseline, "beats_sample_submission":
                  r.beats_baseline,
                  "families": dict(r.families), "statuses": dict(r.statuses),
                  "failures": r.failures,
                  "reward_mean": float(np.mean(r.rewards)) if r.rewards else None,
                  "valid_frac": r.valid_frac, "valid_by_mode": r.valid_by_mode(),
                  "score_mean_valid": r.score_mean_valid,
                  "best_at_k": {str(k): v for k, v in r.best_at_k().items()},
                  "n_solve": len(r.solve_scores()),
                  "scores": [x["score"] for x in r.samples],
                  "modes": [x["mode"] for x in r.samples],
                  "sample_families": [x.get("family") for x in r.samples],
                  "durations_s": [x["duration_s"] for x in r.samples]}
            for tid, r in results.items()}
