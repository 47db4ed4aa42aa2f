"""The metrics of one update's batch, as logged to metrics.jsonl (one row per update).

Sums over this process's rollouts, reduced over all processes with one small all-gather
(every process calls `batch_metrics` once per update, in lockstep with the update itself).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from mle_rl.agent.prompt_sources import signed
from mle_rl.env import families
from mle_rl.runtime import distributed


def batch_metrics(rollouts: list, *, step: int, tasks: dict, task_ids, best: dict,
                  dropped_stale: int, actions_done: int, busy: dict, wall: float,
                  per_seq: Optional[dict] = None) -> dict:
    """rollouts: this process's `Rollout`s of the update; step: the policy version after
    it; tasks: {id: Task}; task_ids: `--tasks` in order; best: {task id: best raw score so
    far}; dropped_stale, actions_done: this process's counts so far; busy: seconds spent
    by "learner" and "sampler"; wall: seconds since the run started; per_seq: the learner's
    {"advantage": [n], "weight": [n]} for the rollouts, in order (`Learner.last_per_seq`).

    With per_seq, the credit each model family got, as means over the family's programs:
    `advantage/<family>`, `weight/<family>` (duration weight; 1 without weights) and
    `credit/<family>` (weight x advantage: what the policy gradient scales the family's
    log-probabilities by)."""
    fams = sorted(families.FAMILIES) + ["ensemble", "none"]
    meta = [x.meta for x in rollouts]
    fam_of = [m.get("family", "none") for m in meta]
    credit = {}
    if per_seq and len(per_seq.get("advantage", ())) == len(rollouts):
        a = np.asarray(per_seq["advantage"], np.float64)
        w = np.asarray(per_seq.get("weight", np.ones(len(a))), np.float64)
        for key, vals in (("advantage", a), ("weight", w), ("credit", w * a)):
            credit.update({f"{key}/{f}": float(sum(v for v, g in zip(vals, fam_of) if g == f))
                           for f in fams})
    sums = {                                     # summed over processes
        "n": len(rollouts), "reward": sum(x.reward for x in rollouts),
        "ok": sum(x.status == "ok" for x in rollouts),
        "duration": sum(x.duration_s for x in rollouts),
        "staleness": sum(step - 1 - x.policy_version for x in rollouts),
        "improve": sum(x.prompt_kind == "improve" for x in rollouts),
        "hits": sum(m.get("hits", 0) for m in meta),
        "lm": sum(m.get("lm") == "lm" for m in meta),
        "lm_fallback": sum(m.get("lm") == "lm_fallback" for m in meta),
        "dropped_stale": dropped_stale,
        "actions_done": actions_done,
        **{f"family/{f}": sum(g == f for g in fam_of) for f in fams}, **credit,
        **{f"scored/{t}": sum(x.task_id == t and x.score is not None for x in rollouts)
           for t in task_ids},
        **{f"score_sum/{t}": sum(float(x.score) for x in rollouts
                                 if x.task_id == t and x.score is not None) for t in task_ids}}
    means = {"learner_busy_frac": busy["learner"] / max(wall, 1e-9),   # averaged
             "sampler_busy_frac": busy["sampler"] / max(wall, 1e-9)}
    best_signed = [signed(best[t], tasks[t].is_lower_better) if t in best
                   else -np.inf for t in task_ids]                    # max over processes
    rows = distributed.allgather_host(
        np.array([*sums.values(), *means.values(), *best_signed], np.float64))
    k, j = len(sums), len(sums) + len(means)
    tot = dict(zip(sums, rows[:, :k].sum(0)))
    n = tot["n"]
    out = dict(reward_mean=float(tot["reward"] / n), valid_frac=float(tot["ok"] / n),
               duration_mean_s=float(tot["duration"] / n),
               staleness_mean=float(tot["staleness"] / n),
               improve_frac=float(tot["improve"] / n), hits_mean=float(tot["hits"] / n),
               dropped_stale=int(tot["dropped_stale"]),
               actions_done=int(tot["actions_done"]),
               **{k_: float(v) for k_, v in zip(means, rows[:, k:j].mean(0))},
               wall_s=wall)
    lm_runs = tot["lm"] + tot["lm_fallback"]    # programs the frozen LM instrumented
    if lm_runs:
        out["lm_instrument_accept_frac"] = float(tot["lm"] / lm_runs)
    out.update({k_: float(v / n) for k_, v in tot.items() if k_.startswith("family/") and v})
    for k_ in credit:             # a mean over the family's programs (of every process)
        count = tot[f"family/{k_.split('/', 1)[1]}"]
        if count:
            out[k_] = float(tot[k_] / count)
    for tid in task_ids:          # the mean raw score of the valid programs, per task
        if tot[f"scored/{tid}"]:
            out[f"score_mean_valid/{tid}"] = float(tot[f"score_sum/{tid}"] / tot[f"scored/{tid}"])
    for tid, b in zip(task_ids, rows[:, j:].max(0)):
        if np.isfinite(b):
            out[f"best_score/{tid}"] = float(signed(b, tasks[tid].is_lower_better))
    return out
