"""Supervised fine-tuning on the expert corpus: loss on response tokens only.

    loss = -sum_bt m_bt log p(y_bt | x_<=t) / sum_bt m_bt,   m = the response-token mask

computed with `losses.chunked_token_logprobs`, so `[B, T, V]` logits never exist. The
update is one jitted function of pure-dict parameters and the optimizer state, both donated;
batches are sharded over the mesh's data axis. Training runs `max_steps` steps with a
cosine learning rate over them (warmup, then decay to 10%), so the same build makes the
same policy on any machine, fast or slow: the clock never moves the learning rate.
`time_budget_s` is only a guard (a machine so slow that it would run past it stops there, at
the learning rate its steps had reached, and says so in the history's `stopped_by`). With
`max_steps=None` the cosine follows the time budget instead (a build that ends on time
whatever the machine's speed, and whose policy depends on it). Training also stops after
`max_epochs`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
import random
import time
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from mle_rl.models import sharding as shd
from mle_rl.rl import losses
from mle_rl.warmstart import sft_data


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    lr: float = 2e-3
    warmup_steps: int = 10
    weight_decay: float = 0.0
    max_epochs: float = 10.0
    time_budget_s: float = 1200.0       # a guard when max_steps is set
    max_steps: Optional[int] = 640
    tokens_per_batch: int = 2048
    buckets: tuple = (128, 192, 256, 384, 640)
    eval_every: int = 20
    chunk_size: int = 256
    seed: int = 0


def sft_loss(params, graphdef, batch: dict, chunk_size: int):
    """Mean negative log-likelihood over the response tokens. batch: tokens/targets/mask
    int32 [B, T], loss_mask float32 [B, T]. Returns (loss scalar, n response tokens)."""
    model = nnx.merge(graphdef, params)
    h, _ = model.hidden_states(batch["tokens"], batch["mask"])
    logp = losses.chunked_token_logprobs(h, model.lm_head_kernel(), batch["targets"],
                                         chunk_size=chunk_size)
    n = jnp.maximum(batch["loss_mask"].sum(), 1.0)
    return -(logp * batch["loss_mask"]).sum() / n, n


def make_optimizer(cfg: SFTConfig):
    return optax.chain(optax.clip_by_global_norm(1.0),
                       optax.inject_hyperparams(optax.adamw)(learning_rate=cfg.lr,
                                                             weight_decay=cfg.weight_decay))


@functools.partial(jax.jit, static_argnames=("graphdef", "opt", "chunk_size"),
                   donate_argnums=(0, 1))
def train_step(params, opt_state, batch, lr, *, graphdef, opt, chunk_size):
    """One AdamW step at learning rate `lr`. Returns (params, opt_state, loss)."""
    (loss, _), grads = jax.value_and_grad(sft_loss, has_aux=True)(params, graphdef, batch,
                                                                  chunk_size)
    opt_state[1].hyperparams["learning_rate"] = lr
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@functools.partial(jax.jit, static_argnames=("graphdef", "chunk_size"))
def eval_step(params, batch, *, graphdef, chunk_size):
    """(sum of response-token NLL, number of response tokens)."""
    loss, n = sft_loss(params, graphdef, batch, chunk_size)
    return loss * n, n


def lr_at(cfg: SFTConfig, step: int, frac_time: float) -> float:
    """Linear warmup over `warmup_steps`, then a cosine from `lr` to `lr / 10` over the
    steps (`max_steps`; `frac_time` is then ignored, so the schedule, and the policy, do not
    depend on the machine's speed or on compile times), or over the time budget
    (`max_steps=None`)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = frac_time if cfg.max_steps is None else step / cfg.max_steps
    c = 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
    return cfg.lr * (0.1 + 0.9 * c)


def _put(batch: dict, mesh):
    if mesh is None:
        return {k: jnp.asarray(v) for k, v in batch.items()}
    return {k: jax.device_put(v, shd.batch_sharding(mesh, v.ndim)) for k, v in batch.items()}


def evaluate(params, graphdef, rows: Sequence, cfg: SFTConfig, pad_id: int, mesh) -> float:
    """Mean response-token NLL over `rows`."""
    tot = n = 0.0
    multiple = mesh.shape[shd.DATA] if mesh is not None else 1
    for b in sft_data.batches(rows, cfg.buckets, cfg.tokens_per_batch, pad_id,
                              random.Random(0), multiple):
        s, k = eval_step(params, _put(b, mesh), graphdef=graphdef, chunk_size=cfg.chunk_size)
        tot, n = tot + float(s), n + float(k)
    return tot / max(n, 1.0)


def train(model, train_rows: Sequence, eval_rows: Sequence, cfg: SFTConfig, pad_id: int, *,
          mesh=None, log: Callable = print) -> dict:
    """Fine-tunes `model` in place. Returns the history: {"step", "epoch", "seconds",
    "train_loss", "eval": [(step, loss)], "tokens", "response_tokens", "stopped_by":
    "steps" | "epochs" | "time guard" | "time budget"}."""
    if mesh is None:
        mesh = shd.make_mesh()
    shd.shard_model(model, mesh)
    graphdef, params = nnx.split(model)
    opt = make_optimizer(cfg)
    opt_state = opt.init(params)
    rng = random.Random(cfg.seed)
    hist = {"step": [], "epoch": [], "seconds": [], "train_loss": [], "eval": [], "tokens": 0,
            "response_tokens": 0, "stopped_by": "epochs"}
    t0 = time.time()
    step, epoch, stop = 0, 0, False
    multiple = mesh.shape[shd.DATA]
    n_batches = sft_data.count_batches(train_rows, cfg.buckets, cfg.tokens_per_batch, multiple)
    if eval_rows:
        hist["eval"].append((0, evaluate(params, graphdef, eval_rows, cfg, pad_id, mesh)))
        log(f"  sft step 0: held-out loss {hist['eval'][-1][1]:.3f}")
    while not stop:
        seen = 0
        for b in sft_data.batches(train_rows, cfg.buckets, cfg.tokens_per_batch, pad_id, rng,
                                  multiple):
            frac = (time.time() - t0) / max(cfg.time_budget_s, 1e-9)
            lr = lr_at(cfg, step, frac)
            hist["tokens"] += int(b["mask"].sum())
            hist["response_tokens"] += int(b["loss_mask"].sum())
            params, opt_state, loss = train_step(params, opt_state, _put(b, mesh),
                                                 jnp.float32(lr), graphdef=graphdef, opt=opt,
                                                 chunk_size=cfg.chunk_size)
            step += 1
            seen += 1
            epoch_now = epoch + seen / max(n_batches, 1)
            loss = float(loss)
            elapsed = time.time() - t0
            hist["step"].append(step)
            hist["epoch"].append(epoch_now)
            hist["seconds"].append(elapsed)
            hist["train_loss"].append(loss)
            if step % 5 == 0 or step == 1:
                log(f"  sft step {step} epoch {epoch_now:.2f}: loss {loss:.3f} lr {lr:.2e} "
                    f"({elapsed:.0f}/{cfg.time_budget_s:.0f} s, "
                    f"{hist['tokens'] / max(elapsed, 1e-9):.0f} tokens/s)")
            if eval_rows and step % cfg.eval_every == 0:
                hist["eval"].append((step, evaluate(params, graphdef, eval_rows, cfg, pad_id,
                                                    mesh)))
                log(f"  sft step {step}: held-out loss {hist['eval'][-1][1]:.3f}")
            if cfg.max_steps is not None and step >= cfg.max_steps:
                hist["stopped_by"], stop = "steps", True
                break
            if elapsed >= cfg.time_budget_s:
                hist["stopped_by"] = "time budget" if cfg.max_steps is None else "time guard"
                if cfg.max_steps is not None:
                    log(f"  sft: the time guard ({cfg.time_budget_s:.0f} s) stopped training "
                        f"at step {step} of {cfg.max_steps}: this machine builds a shorter-"
                        f"trained policy than the default (raise --sft_minutes to finish)")
                stop = True
                break
        epoch += 1
        if epoch >= cfg.max_epochs:
            stop = True
    if eval_rows and (not hist["eval"] or hist["eval"][-1][0] != step):
        hist["eval"].append((step, evaluate(params, graphdef, eval_rows, cfg, pad_id, mesh)))
        log(f"  sft step {step}: held-out loss {hist['eval'][-1][1]:.3f}")
    nnx.update(model, params)
    hist["seconds_total"] = time.time() - t0
    hist["epochs"] = hist["epoch"][-1] if hist["epoch"] else 0.0
    return hist


def plot_curve(hist: dict, path) -> Optional[pathlib.Path]:
    """Train (smoothed) and held-out loss vs step, as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    y = np.asarray(hist["train_loss"])
    if len(y):
        k = max(1, len(y) // 20)
        smooth = np.convolve(y, np.ones(k) / k, mode="valid")
        ax.plot(hist["step"], y, alpha=0.3, color="C0")
        ax.plot(hist["step"][k - 1:], smooth, color="C0", label="train (response tokens)")
    if hist["eval"]:
        s, v = zip(*hist["eval"])
        ax.plot(s, v, "o-", color="C1", label="held-out")
    ax.set_xlabel("step")
    ax.set_ylabel("NLL per response token")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Warm-start SFT")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return pathlib.Path(path)
