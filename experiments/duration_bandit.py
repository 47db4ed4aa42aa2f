r"""The duration bias of asynchronous collection, measured on a K-armed bandit.

The paper argues that with asynchronous actors a fast action x is completed
~ pi(x) T / dt_x times in a window T, so the unweighted policy gradient follows the gradient
of the reward *rate* and weighting each sample by dt restores grad E_pi[r]. Whether that
happens depends on how completions are collected. Collection models:

  window     the paper's model: a completed sample is arm a with probability
             q(a) ∝ pi(a) / E[dt_a] (i.i.d., current policy).
  pool       event-driven: N actors; each samples a new action from the *current* policy
             when its previous one finishes; the learner updates on the first B completions
             (PPO ratio against the sampling policy); no staleness limit.
  pool_k     the same, dropping results older than k policy versions.
  cold       (cosines only) the first B completions after N actors start together.

For each model, with and without `duration_weights`, over many seeds: final arm
probabilities; and at fixed policies the cosine between the expected update (average of
many updates, and analytic where it exists) and the synchronous gradient grad E_pi[r].
Every update goes through `mle_rl.rl.losses.policy_loss`.

  python experiments/duration_bandit.py --out_dir=experiments/results
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import pathlib
import sys
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

from mle_rl.rl import losses

ARMS = ("fail-fast", "fast-mediocre", "slow-best")
REWARD = np.array([-1.0, 0.4, 1.0], np.float32)
DURATION = np.array([0.2, 1.0, 8.0], np.float32)  # mean execution time of each arm
SIGMA = 0.5  # durations are lognormal around their mean, log-std SIGMA
FLOOR = 0.05  # duration_weights floor (below every arm's typical duration)
PROBE_POLICIES = {"uniform": (1 / 3, 1 / 3, 1 / 3), "leaning-fast": (0.1, 0.6, 0.3)}

_SEEDS = flags.DEFINE_integer("seeds", 24, "Independent training runs per configuration.")
_UPDATES = flags.DEFINE_integer("updates", 300, "Policy updates per run.")
_BATCH = flags.DEFINE_integer("batch", 16, "Completions per update (B).")
_ACTORS = flags.DEFINE_integer("actors", 16, "Actors in the event-driven pool (N).")
_STALENESS = flags.DEFINE_integer("staleness", 2, "pool_k drops results older than k versions.")
_LR = flags.DEFINE_float("lr", 0.5, "SGD step size on the logits.")
_COS_BATCHES = flags.DEFINE_integer("cos_batches", 4000, "Updates averaged per cosine.")
_OUT_DIR = flags.DEFINE_string("out_dir", "experiments/results", "Where to write results.")


@dataclasses.dataclass(frozen=True)
class Config:
  seeds: int
  updates: int
  batch: int
  actors: int
  staleness: int
  lr: float
  cos_batches: int
  out_dir: str


def durations_for(rng: np.random.Generator, actions: np.ndarray) -> np.ndarray:
  """Lognormal durations with mean DURATION[a]: ``[n] int -> [n] float32``."""
  z = rng.normal(size=np.shape(actions))
  return (DURATION[actions] * np.exp(SIGMA * z - SIGMA**2 / 2)).astype(np.float32)


# ----------------------------------------------------------------- the update (JAX)


def update_direction(theta, actions, old_logp, rewards, durations, weighted: bool,
                     baseline: bool = True):
  """``-grad_theta policy_loss`` for one batch of one-token "sequences".

  Shapes: theta ``[K]``, actions ``[B]`` int32, old_logp/rewards/durations ``[B]``.
  Advantage = reward - batch-mean reward (just the reward if not ``baseline``);
  weights = duration_weights(dt) if ``weighted``. Returns ``[K]``.
  """

  def loss(th):
    lp = jax.nn.log_softmax(th)[actions][:, None]
    adv = (rewards - jnp.mean(rewards) * baseline)[:, None]
    w = losses.duration_weights(durations, floor=FLOOR) if weighted else None
    return losses.policy_loss(lp, old_logp[:, None], adv, jnp.ones_like(lp), weights=w,
                              clip_eps=0.2)[0]

  return -jax.grad(loss)(theta)


# vmapped over a leading axis of (theta, batch): seeds in training, batches in probes.
_directions = jax.jit(jax.vmap(update_direction, in_axes=(0, 0, 0, 0, 0, None, None)),
                      static_argnums=(5, 6))


def sync_gradient(pi: np.ndarray) -> np.ndarray:
  """grad_theta E_pi[r] for softmax logits: ``pi * (r - E_pi r)``."""
  return pi * (REWARD - pi @ REWARD)


def rate_gradient(pi: np.ndarray) -> np.ndarray:
  """grad_theta E_pi[r / dt] (the paper's "reward rate")."""
  x = REWARD / DURATION
  return pi * (x - pi @ x)


def cosine(a, b) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


# ------------------------------------------------------------------- window model


def window_probs(pi):
  """Completion distribution of the window model: ``q ∝ pi / E[dt]``; ``[K] -> [K]``."""
  q = pi / DURATION
  return q / q.sum()


def window_batches(rng, pi, n_batches, batch):
  """``n_batches`` i.i.d. window batches at a fixed policy: dict of ``[n, B]`` arrays."""
  a = rng.choice(len(ARMS), size=(n_batches, batch), p=window_probs(pi))
  return {"actions": a, "old_logp": np.log(pi)[a].astype(np.float32),
          "rewards": REWARD[a], "durations": durations_for(rng, a)}


def window_analytic(pi, weighted, baseline=True):
  """Large-B expected window update (normalizer E_q[dt], baseline E_q[r] or 0); ``[K]``."""
  q = window_probs(pi)
  w = DURATION / (q @ DURATION) if weighted else np.ones_like(DURATION)
  coef = q * w * (REWARD - (q @ REWARD) * baseline)  # sum_a coef_a grad log pi_a
  return coef - pi * coef.sum()


# ------------------------------------------------------------ event-driven pool


class Pool:
  """N actors on a simulated clock; the learner takes the first B accepted completions.

  An actor samples from the policy current when it (re)starts, records the policy
  version and its log-prob, and finishes after a random duration. A completion older than
  ``staleness`` versions at arrival is dropped (the actor restarts all the same).
  """

  def __init__(self, rng: np.random.Generator, actors: int, staleness: int | None):
    self.rng, self.staleness = rng, staleness
    self.clock, self.version, self.dropped, self.accepted = 0.0, 0, 0, 0
    self.heap: list = []
    self.idle = list(range(actors))
    self._seq = 0

  def _start(self, actor, cum_pi, log_pi):
    a = min(int(np.searchsorted(cum_pi, self.rng.random(), side="right")), len(ARMS) - 1)
    dt = float(durations_for(self.rng, np.array([a]))[0])
    self._seq += 1
    heapq.heappush(self.heap, (self.clock + dt, self._seq, actor, a, self.version,
                               log_pi[a], dt))

  def next_batch(self, pi: np.ndarray, batch: int):
    """Runs the clock to the B-th accepted completion; returns dict of ``[B]`` arrays."""
    cum_pi, log_pi = np.cumsum(pi), np.log(pi)
    for actor in self.idle:
      self._start(actor, cum_pi, log_pi)
    self.idle = []
    out = []
    while len(out) < batch:
      self.clock, _, actor, a, v, lp, dt = heapq.heappop(self.heap)
      if self.staleness is not None and self.version - v > self.staleness:
        self.dropped += 1
      else:
        out.append((a, lp, dt))
        self.accepted += 1
      if len(out) < batch:
        self._start(actor, cum_pi, log_pi)
      else:
        self.idle.append(actor)  # restarts after the update, with the new policy
    self.version += 1
    a, lp, dt = (np.array(x) for x in zip(*out))
    return {"actions": a, "old_logp": lp.astype(np.float32), "rewards": REWARD[a],
            "durations": dt.astype(np.float32)}


def pool_stationary_analytic(pi, weighted):
  """Large-B expected pool update at a fixed policy, no drops (completions ~ pi); ``[K]``."""
  w = DURATION / (pi @ DURATION) if weighted else np.ones_like(DURATION)
  coef = pi * w * (REWARD - pi @ REWARD)
  return coef - pi * coef.sum()


# ------------------------------------------------------------------ experiments

# name -> (collection, staleness limit or None, advantage has a baseline)
def models(cfg: Config) -> dict:
  return {"window": ("window", None, True), "window_nobase": ("window", None, False),
          "pool": ("pool", None, True),
          f"pool_k{cfg.staleness}": ("pool", cfg.staleness, True)}


def _stack(batches):
  return {k: np.stack([b[k] for b in batches]) for k in batches[0]}


def mean_direction(pi, data, weighted, baseline, groups=10):
  """Average update over ``[n, B]`` batches at fixed ``pi``, and a rough s.e. of its cosine."""
  n = data["actions"].shape[0]
  theta = np.broadcast_to(np.log(pi).astype(np.float32), (n, len(ARMS)))
  d = np.asarray(_directions(theta, data["actions"], data["old_logp"], data["rewards"],
                             data["durations"], weighted, baseline))
  sync = sync_gradient(pi)
  group_cos = [cosine(g.mean(0), sync) for g in np.array_split(d, groups)]
  return d.mean(0), float(np.std(group_cos) / np.sqrt(groups))


def _probe_data(cfg, rng, pi, collection, staleness, batch):
  """``cos_batches`` batches at fixed ``pi`` (pools: after 50 burn-in batches)."""
  if collection == "window":
    return window_batches(rng, pi, cfg.cos_batches, batch), 0.0
  if collection == "cold":  # first batch of many freshly started pools
    return _stack([Pool(rng, cfg.actors, None).next_batch(pi, batch)
                   for _ in range(cfg.cos_batches)]), 0.0
  pool = Pool(rng, cfg.actors, staleness)
  batches = [pool.next_batch(pi, batch) for _ in range(cfg.cos_batches + 50)][50:]
  return _stack(batches), pool.dropped / (pool.dropped + pool.accepted)


def probe(cfg: Config, rng: np.random.Generator) -> tuple[list[dict], list[dict]]:
  """Cosines of expected updates with grad E_pi[r] and grad E_pi[r/dt] at fixed policies.

  Returns (rows per policy x model x weighting, rows of the window batch-size sweep).
  """
  rows = []
  specs = dict(models(cfg), cold=("cold", None, True))
  for name, pi in PROBE_POLICIES.items():
    pi = np.asarray(pi, np.float64)
    cache = {}
    for model, (collection, k, baseline) in specs.items():
      key = (collection, k)
      if key not in cache:
        cache[key] = _probe_data(cfg, rng, pi, collection, k, cfg.batch)
      data, drop = cache[key]
      for weighted in (False, True):
        mean, sem = mean_direction(pi, data, weighted, baseline)
        row = {"policy": name, "pi": pi.round(3).tolist(), "model": model,
               "weighted": weighted, "cos_sync": cosine(mean, sync_gradient(pi)),
               "cos_sync_sem": sem, "cos_rate": cosine(mean, rate_gradient(pi)),
               "drop_frac": drop,
               "arm_freq": (np.bincount(data["actions"].ravel(), minlength=3)
                            / data["actions"].size).round(4).tolist()}
        if collection == "window":
          row["cos_sync_analytic"] = cosine(window_analytic(pi, weighted, baseline),
                                            sync_gradient(pi))
          row["cos_rate_analytic"] = cosine(window_analytic(pi, weighted, baseline),
                                            rate_gradient(pi))
        if model == "pool":
          row["cos_sync_analytic"] = cosine(pool_stationary_analytic(pi, weighted),
                                            sync_gradient(pi))
        rows.append(row)
  sweep = []
  pi = np.asarray(PROBE_POLICIES["uniform"], np.float64)
  for batch in (4, 16, 64, 256):
    data, _ = _probe_data(cfg, rng, pi, "window", None, batch)
    for baseline in (True, False):
      mean, sem = mean_direction(pi, data, True, baseline)
      sweep.append({"batch": batch, "baseline": baseline,
                    "cos_sync": cosine(mean, sync_gradient(pi)), "sem": sem})
  return rows, sweep


def train(cfg: Config, model: str, weighted: bool, seed: int) -> dict:
  """Trains cfg.seeds softmax policies in lockstep; returns probability trajectories."""
  collection, k, baseline = models(cfg)[model]
  rng = np.random.default_rng(seed)
  theta = np.zeros((cfg.seeds, len(ARMS)), np.float32)
  pools = [Pool(rng, cfg.actors, k) for _ in range(cfg.seeds)] if collection == "pool" else []
  traj = np.zeros((cfg.updates + 1, cfg.seeds, len(ARMS)))

  def softmax(th):
    e = np.exp(th - th.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)

  traj[0] = softmax(theta)
  for step in range(cfg.updates):
    pis = softmax(theta.astype(np.float64))
    if collection == "window":
      data = {key: v[:, 0] for key, v in
              _stack([window_batches(rng, p, 1, cfg.batch) for p in pis]).items()}
    else:
      data = _stack([pool.next_batch(p, cfg.batch) for pool, p in zip(pools, pis)])
    g = _directions(theta, data["actions"], data["old_logp"], data["rewards"],
                    data["durations"], weighted, baseline)
    theta = theta + cfg.lr * np.asarray(g)
    traj[step + 1] = softmax(theta)
  out = {"traj": traj}
  if pools:
    out["drop_frac"] = float(np.mean([p.dropped / (p.dropped + p.accepted) for p in pools]))
    out["sim_time"] = float(np.mean([p.clock for p in pools]))
  return out


# --------------------------------------------------------------------- main


def main(argv):
  del argv
  cfg = Config(_SEEDS.value, _UPDATES.value, _BATCH.value, _ACTORS.value, _STALENESS.value,
               _LR.value, _COS_BATCHES.value, _OUT_DIR.value)
  import duration_bandit_report as report  # pylint: disable=g-import-not-at-top
  out_dir = pathlib.Path(cfg.out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  t0 = time.time()
  print(f"probing expected updates ({cfg.cos_batches} batches of {cfg.batch} each)...",
        flush=True)
  rows, sweep = probe(cfg, np.random.default_rng(0))
  print(f"  done in {time.time() - t0:.0f}s", flush=True)
  runs = {}
  for i, model in enumerate(models(cfg)):
    for weighted in (False, True):
      t1 = time.time()
      runs[(model, weighted)] = train(cfg, model, weighted, seed=100 + 2 * i + weighted)
      final = runs[(model, weighted)]["traj"][-1]
      print(f"train {model:>13} weighted={weighted!s:5}: mean P(arms) = "
            f"{np.round(final.mean(0), 3).tolist()}  ({time.time() - t1:.0f}s)", flush=True)
  summary = report.write(cfg, sys.modules[__name__], rows, sweep, runs, out_dir)
  (out_dir / "duration_bandit.json").write_text(json.dumps(summary, indent=1))
  print(f"wrote {out_dir}/duration_bandit.{{md,png,json}} in {time.time() - t0:.0f}s")


if __name__ == "__main__":
  app.run(main)
