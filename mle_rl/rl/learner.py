"""The PPO learner: a train state and one jitted, donated update `(state, batch) -> (state, metrics)`.

The update (`ppo_update.py`), top to bottom:
  1. with the parameters as they are: reference log-probs, old values (GAE only);
  2. token rewards = sequence reward at the last generated token − β · KL(behaviour ‖ ref),
     β fixed or adaptive (`kl_ctrl`);
  3. advantages: GAE (γ, λ) with a critic, whitened; or critic-free, from the samples of the
     same prompt (`advantage=grpo|rloo|max_at_k`, rows grouped by `group_ids`); duration weights
     Δt / mean Δt (with every estimator);
  4. `epochs × minibatches` steps (one `lax.scan`) of the dual-clip PPO surrogate (each
     sequence's tokens weighted by its duration weight), entropy bonus, optional KL loss and,
     with GAE, the clipped value loss; global-norm clipping and separate AdamW states for
     actor and critic. A step whose loss or gradient is not finite is skipped: parameters
     and optimizer states stay bit-identical, and `nonfinite_skips` counts it.

With `advantage=grpo|rloo|max_at_k` there is no critic at all: no value module, no critic optimizer
state, no value forward pass (`TrainState.critic` and `.critic_opt` are None, so checkpoints
hold none).

Batch (host numpy or device arrays; `B` sequences of length `L`):
  tokens [B, L] int32             prompt (left-padded) then response, then right padding
  attention_mask [B, L]           1 on real tokens
  response_mask [B, L]            1 on generated tokens (the actions)
  behaviour_logprobs [B, L] f32   log π_behaviour(token_t | tokens_<t) at sampling time
  rewards [B] f32, durations [B] f32 (Δt, seconds)
  group_ids [B] int32             (critic-free only) equal ids = samples of the same prompt
  valid [B] f32                   (max_at_k with best_of_k_valid_coef > 0 or
                                  best_of_k_scale="scores") 1 = graded submission

Parameters are pure dicts (`nnx.to_pure_dict`); graph definitions are static. On a mesh,
parameters follow `models.sharding` and the batch is split over the `data` axis.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from mle_rl.runtime import distributed
from mle_rl.models import sharding as shd
from mle_rl.models.qwen2 import Qwen2
from mle_rl.models.value_head import Critic, ValueHead
from mle_rl.rl import group_advantages as group_adv
from mle_rl.rl import kl as rl_kl
from mle_rl.rl import losses
from mle_rl.rl.ppo_update import TrainState, policy_logprobs, ppo_update  # noqa: F401

_ppo_update = ppo_update             # the name experiments/multihost_demo.py uses

BATCH_KEYS = ("tokens", "attention_mask", "response_mask", "behaviour_logprobs", "rewards",
              "durations")
ADVANTAGES = ("gae", "grpo", "rloo", "max_at_k")
KL_CONTROLLERS = ("fixed", "adaptive")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """The learner's settings; `mle_rl/rl/README.md` maps each to its verl config name."""
    actor_lr: float = 1e-5
    critic_lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    clip_eps: float = 0.2
    clip_eps_high: Optional[float] = None   # None: = clip_eps
    clip_ratio_c: Optional[float] = 3.0     # dual-clip bound for A < 0; None: off
    value_clip_eps: float = 0.2
    vf_coef: float = 0.5            # used when the critic shares the policy trunk
    ent_coef: float = 0.0
    kl_coef: float = 0.02           # β: KL(behaviour || reference) subtracted in the reward
    kl_kind: str = "k1"
    kl_ctrl: str = "fixed"          # fixed | adaptive (β follows kl_target over kl_horizon)
    kl_target: float = 0.1
    kl_horizon: float = 10000.0
    use_kl_loss: bool = False       # add kl_loss_coef · KL(π_θ || ref) to the actor loss
    kl_loss_coef: float = 0.001
    kl_loss_kind: str = "k3"        # verl low_var_kl
    advantage: str = "gae"          # gae (critic) | grpo | rloo | max_at_k (critic-free)
    grpo_std: bool = True           # GRPO, max_at_k: divide by the group's std (False: Dr. GRPO)
    best_of_k: int = 4              # max_at_k: the k of the expected best of k draws
    best_of_k_mean_coef: float = 0.0   # max_at_k: λ of (1 - λ) E[best of k] + λ E[score]
    best_of_k_valid_coef: float = 0.0  # max_at_k: weight μ of the validity term (batch "valid")
    best_of_k_scale: str = "group"     # max_at_k: divide by each group's std | the batch's valid scores' std
    gamma: float = 1.0
    lam: float = 0.95
    epochs: int = 1
    minibatches: int = 1
    duration_weights: bool = True
    duration_floor: float = 1.0
    duration_cap: Optional[float] = None
    reduction: str = "token_mean"
    loss_scale_factor: Optional[float] = None   # seq_mean_token_sum_norm divisor (None: T)
    whiten_advantages: bool = True  # GAE only (as verl); unbiased variance
    critic: str = "separate"        # separate (own trunk copy) | shared (head on policy trunk)
    logprob_chunk: int = 128
    remat: bool = False             # gradient checkpointing of the trunks' layers (Qwen2.remat)

    def __post_init__(self):
        def check(ok, message):
            if not ok:
                raise ValueError(message)
        check(self.critic in ("separate", "shared"),
              f"critic must be 'separate' or 'shared', got {self.critic!r}.")
        check(self.epochs >= 1 and self.minibatches >= 1, "epochs and minibatches must be >= 1.")
        check(self.advantage in ADVANTAGES,
              f"advantage must be one of {ADVANTAGES}, got {self.advantage!r}.")
        check(self.best_of_k >= 1, f"best_of_k must be >= 1, got {self.best_of_k}.")
        check(0.0 <= self.best_of_k_mean_coef <= 1.0,
              f"best_of_k_mean_coef must be in [0, 1], got {self.best_of_k_mean_coef}.")
        check(0.0 <= self.best_of_k_valid_coef < float("inf"),
              f"best_of_k_valid_coef must be finite and >= 0, got {self.best_of_k_valid_coef}.")
        check(self.best_of_k_scale in group_adv.SCALES,
              f"best_of_k_scale must be one of {group_adv.SCALES}, got {self.best_of_k_scale!r}.")
        check(self.best_of_k_scale == "group" or self.grpo_std,
              "best_of_k_scale='scores' divides by a std: it needs grpo_std.")
        check(self.kl_ctrl in KL_CONTROLLERS,
              f"kl_ctrl must be one of {KL_CONTROLLERS}, got {self.kl_ctrl!r}.")
        check(self.kl_ctrl == "fixed" or (self.kl_target > 0 and self.kl_horizon > 0
                                          and self.kl_coef > 0),
              "kl_ctrl=adaptive needs kl_coef > 0 (the initial β), kl_target > 0 and "
              "kl_horizon > 0.")
        check(self.clip_ratio_c is None or self.clip_ratio_c > 1,
              f"clip_ratio_c must be > 1 (verl: 3) or None, got {self.clip_ratio_c}.")
        check(self.reduction in losses.REDUCTIONS,
              f"reduction must be one of {losses.REDUCTIONS}, got {self.reduction!r}.")
        for name in ("kl_kind", "kl_loss_kind"):
            check(getattr(self, name) in rl_kl.KL_KINDS,
                  f"{name} must be one of {rl_kl.KL_KINDS}, got {getattr(self, name)!r}.")

    @property
    def critic_free(self) -> bool:
        """GRPO / RLOO: no value model is built, stored, or run."""
        return self.advantage != "gae"

    @property
    def batch_keys(self) -> tuple:
        keys = BATCH_KEYS + (("group_ids",) if self.critic_free else ())
        if self.advantage == "max_at_k" and (self.best_of_k_valid_coef > 0
                                             or self.best_of_k_scale == "scores"):
            keys += ("valid",)
        return keys


def _optimizer(lr, cfg: PPOConfig):
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm),
                       optax.adamw(lr, weight_decay=cfg.weight_decay))


def _leaf_buffers(x) -> tuple:
    """The device buffers of one concrete array (one per addressable shard); () for others."""
    if not isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer):
        return ()
    try:
        return tuple(s.data.unsafe_buffer_pointer() for s in x.addressable_shards)
    except ValueError:
        # Arrays placed on a mesh that spans processes can refuse to list their shards as
        # single-device arrays (jax 0.10); those leaves are copied, as every leaf once was.
        return ()


def _buffers(tree) -> set:
    return {b for x in jax.tree.leaves(tree) for b in _leaf_buffers(x)}


def _own_buffers(tree, avoid: set):
    """`tree` with every leaf in a buffer of its own: a leaf whose buffer is in `avoid`, or
    that another leaf already holds, is copied; the rest are kept as they are. Abstract
    leaves (under `jax.eval_shape`) are copied, which costs nothing there."""
    seen = set(avoid)

    def own(x):
        if not isinstance(x, jax.Array):
            return x
        bufs = _leaf_buffers(x)
        if not bufs or seen.intersection(bufs):
            return jnp.copy(x)
        seen.update(bufs)
        return x
    return jax.tree.map(own, tree)


class Learner:
    """Holds the static graph definitions, the optimizers and the jitted update."""

    def __init__(self, policy: Qwen2, cfg: PPOConfig, *, mesh=None, fsdp: bool = False,
                 seed: int = 0, reference: Optional[Qwen2] = None, take_model: bool = False):
        """`take_model=True`: the state takes the arrays of `policy` (and `reference`) instead
        of copying them, so the build never holds the weights twice; the first update donates
        them, and the models passed in must not be used afterwards (the trainer deletes its
        model right after). Default: they are copied and stay usable."""
        self.cfg = cfg
        callers = set() if take_model else _buffers(nnx.state(policy)) | (
            _buffers(nnx.state(reference)) if reference is not None else set())
        self.mesh = mesh
        self.last_per_seq: dict = {}    # update()'s per-sequence values, this process's rows
        self.fsdp = fsdp
        policy.remat = cfg.remat        # static: in the graph of policy, reference, critic trunk
        self.policy_graph, policy_state = nnx.split(policy)
        ref_state = nnx.split(reference)[1] if reference is not None else policy_state
        self.critic_graph = critic_state = self.critic_tx = None
        if not cfg.critic_free:
            if cfg.critic == "separate":
                critic = Critic(nnx.clone(policy))
            else:
                critic = ValueHead(policy.config.hidden_size)
            self.critic_graph, critic_state = nnx.split(critic)
            self.critic_tx = _optimizer(cfg.critic_lr, cfg)
        self.actor_tx = _optimizer(cfg.actor_lr, cfg)
        if mesh is not None:
            put = lambda s: jax.device_put(s, shd.param_shardings(s, mesh, fsdp))
            policy_state, ref_state = put(policy_state), put(ref_state)
            critic_state = None if critic_state is None else put(critic_state)
        p, r = nnx.to_pure_dict(policy_state), nnx.to_pure_dict(ref_state)
        c = None if critic_state is None else nnx.to_pure_dict(critic_state)
        state = TrainState(
            policy=p, critic=c, ref=r,
            actor_opt=self.actor_tx.init(p),
            critic_opt=None if c is None else self.critic_tx.init(c),
            step=jnp.zeros((), jnp.int32),
            rng=jax.random.key_data(jax.random.key(seed)),
            kl_coef=jnp.float32(cfg.kl_coef) if cfg.kl_ctrl == "adaptive" else None)
        # Every leaf its own buffer: the critic's trunk and the reference start as the
        # policy's arrays, and a donated state must not hold one buffer twice. Only those
        # leaves (and the caller's arrays, unless taken) are copied: copying every leaf held
        # the whole state twice at the build's peak (benchmarks/results/real_shapes.md).
        self.state = _own_buffers(state, callers)
        if mesh is not None:
            # step, rng and the Adam counts are made uncommitted; the first update returns
            # them on the mesh, so without this the second update would recompile.
            self.state = jax.tree.map(
                lambda x: x if isinstance(x.sharding, jax.sharding.NamedSharding)
                else jax.device_put(x, shd.replicated(mesh)), self.state)
        # Outputs keep the inputs' shardings; left to XLA, some come back laid out differently
        # (e.g. FSDP norms on `data`) and the next update recompiles.
        out_shardings = None
        if mesh is not None:
            out_shardings = (jax.tree.map(lambda x: x.sharding, self.state), shd.replicated(mesh))
        self._update = jax.jit(functools.partial(ppo_update, self), donate_argnums=(0,),
                               out_shardings=out_shardings)

    # Static identity for jit: the learner's graphs and config never change.
    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def policy(self, state: Optional[TrainState] = None) -> Qwen2:
        """The current policy as a model (shares the state's arrays; for the sampler)."""
        state = state or self.state
        return nnx.merge(self.policy_graph, state.policy)

    def shard_batch(self, batch: dict) -> dict:
        """Host arrays -> device arrays, split over the mesh's `data` axis. With several
        processes, `batch` holds this process's rows and the result is the global batch."""
        keys = self.cfg.batch_keys
        missing = [k for k in keys if k not in batch]
        if missing:
            raise ValueError(f"the batch lacks {missing}: advantage={self.cfg.advantage} needs "
                             f"{list(keys)} (group_ids: [B] ints, equal = same prompt).")
        if self.mesh is not None:
            return distributed.global_batch(batch, self.mesh, keys)
        return {k: jnp.asarray(np.asarray(batch[k])) for k in keys}

    def update(self, batch: dict) -> dict:
        """One PPO update on `batch` (every process calls it, with its own rows); returns
        host-side float metrics. Each row's advantage and duration weight are left in
        `last_per_seq` ({"advantage": [b], "weight": [b]}, this process's rows)."""
        batch = self.shard_batch(batch)
        b = batch["tokens"].shape[0]          # global rows
        if b % self.cfg.minibatches:
            raise ValueError(f"batch size {b} is not divisible by minibatches="
                             f"{self.cfg.minibatches}.")
        self.state, metrics = self._update(self.state, batch)
        metrics = jax.device_get(metrics)
        rows = slice(None)
        if self.mesh is not None and jax.process_count() > 1:
            rows = distributed.local_rows(self.mesh, b)
        # [B] per-sequence values of this process's rows (in its batch's order): advantage
        # and duration weight, for the trainer's per-family credit (`last_per_seq`).
        self.last_per_seq = {k.split("/", 1)[1]: np.asarray(metrics.pop(k))[rows]
                             for k in [k for k in metrics if k.startswith("per_seq/")]}
        return {k: float(v) for k, v in metrics.items()}

    def state_bytes(self) -> dict:
        """Bytes of the train state by part (policy, critic, ref, actor_opt, critic_opt)."""
        size = lambda t: int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(t)))
        return {k: size(getattr(self.state, k))
                for k in ("policy", "critic", "ref", "actor_opt", "critic_opt")}
