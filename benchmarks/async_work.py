"""A synthetic action for bench_async.py: sleeps a heavy-tailed time, returns a result."""

import time

import numpy as np

from mle_rl.env.types import ActionResult


def duration_for(request_id: int, median_s: float, sigma: float, lo: float, hi: float) -> float:
    """Lognormal(log median, sigma) clipped to [lo, hi], fixed by the request id."""
    rng = np.random.default_rng(1000 + request_id)
    return float(np.clip(np.exp(np.log(median_s) + sigma * rng.standard_normal()), lo, hi))


def sleepy(request, ctx) -> ActionResult:
    kw = ctx.work_kwargs
    dt = duration_for(request.request_id, kw["median_s"], kw["sigma"], kw["lo"], kw["hi"])
    time.sleep(dt)
    score = float(np.random.default_rng(request.request_id).uniform())
    return ActionResult(status="ok", score=score, reward=score, duration_s=dt)
