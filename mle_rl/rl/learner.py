"""The PPO learner: a train state and one jitted, donated update `(state, batch) -> (state, metrics)`.

The update, top to bottom:
  1. with the parameters as they are: reference log-probs, old values;
  2. token rewards = sequence reward at the last generated token − kl_coef · KL(behaviour ‖ ref);
  3. GAE (γ, λ) over generated tokens, whitened advantages; duration weights Δt / mean Δt;
  4. `epochs × minibatches` steps (one `lax.scan`) of the clipped surrogate (each sequence's
     tokens weighted by its duration weight), entropy bonus and clipped value loss, with
     global-norm clipping and separate AdamW states for actor and critic.

Batch (host numpy or device arrays; `B` sequences of length `L`):
  tokens [B, L] int32             prompt (left-padded) then response, then right padding
  attention_mask [B, L]           1 on real tokens
  response_mask [B, L]            1 on generated tokens (the actions)
  behaviour_logprobs [B, L] f32   log π_behaviour(token_t | tokens_<t) at sampling time
  rewards [B] f32, durations [B] f32 (Δt, seconds)

Parameters are pure dicts (`nnx.to_pure_dict`); graph definitions are static. On a mesh,
parameters follow `models.sharding` and the batch is split over the `data` axis.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from mle_rl.runtime import distributed
from mle_rl.models import sharding as shd
from mle_rl.models.qwen2 import Qwen2
from mle_rl.models.value_head import Critic, ValueHead
from mle_rl.rl import advantages, losses

BATCH_KEYS = ("tokens", "attention_mask", "response_mask", "behaviour_logprobs", "rewards",
              "durations")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    actor_lr: float = 1e-5
    critic_lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    clip_eps: float = 0.2
    value_clip_eps: float = 0.2
    vf_coef: float = 0.5            # used when the critic shares the policy trunk
    ent_coef: float = 0.0
    kl_coef: float = 0.02           # KL(behaviour || reference) subtracted in the reward
    kl_kind: str = "k1"
    gamma: float = 1.0
    lam: float = 0.95
    epochs: int = 1
    minibatches: int = 1
    duration_weights: bool = True
    duration_floor: float = 1.0
    duration_cap: Optional[float] = None
    reduction: str = "token_mean"
    whiten_advantages: bool = True
    critic: str = "separate"        # separate (own trunk copy) | shared (head on policy trunk)
    logprob_chunk: int = 128

    def __post_init__(self):
        if self.critic not in ("separate", "shared"):
            raise ValueError(f"critic must be 'separate' or 'shared', got {self.critic!r}.")
        if self.epochs < 1 or self.minibatches < 1:
            raise ValueError("epochs and minibatches must be >= 1.")


class TrainState(NamedTuple):
    policy: Any          # pure dict of the policy parameters
    critic: Any          # pure dict: Critic (trunk + head) or ValueHead (shared)
    ref: Any             # pure dict, frozen reference policy
    actor_opt: Any
    critic_opt: Any
    step: jax.Array      # int32 scalar: number of updates done (= policy version)
    rng: jax.Array       # PRNG key data, uint32 [2]


def _optimizer(lr, cfg: PPOConfig):
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm),
                       optax.adamw(lr, weight_decay=cfg.weight_decay))


def policy_logprobs(policy: Qwen2, tokens, attention_mask, chunk: int, return_entropy=False,
                    return_hidden=False):
    """log π(token_t | tokens_<t) for t = 1..L-1: [B, L-1] (and entropy, hidden)."""
    h, _ = policy.hidden_states(tokens[:, :-1], attention_mask[:, :-1])
    out = losses.chunked_token_logprobs(h, policy.lm_head_kernel(), tokens[:, 1:],
                                        chunk_size=chunk, return_entropy=return_entropy)
    if return_hidden:
        return out, h
    return out


class Learner:
    """Holds the static graph definitions, the optimizers and the jitted update."""

    def __init__(self, policy: Qwen2, cfg: PPOConfig, *, mesh=None, fsdp: bool = False,
                 seed: int = 0, reference: Optional[Qwen2] = None):
        self.cfg = cfg
        self.mesh = mesh
        self.fsdp = fsdp
        self.policy_graph, policy_state = nnx.split(policy)
        ref_state = nnx.split(reference)[1] if reference is not None else policy_state
        if cfg.critic == "separate":
            critic = Critic(nnx.clone(policy))
        else:
            critic = ValueHead(policy.config.hidden_size)
        self.critic_graph, critic_state = nnx.split(critic)
        self.actor_tx = _optimizer(cfg.actor_lr, cfg)
        self.critic_tx = _optimizer(cfg.critic_lr, cfg)
        if mesh is not None:
            policy_state = jax.device_put(policy_state, shd.param_shardings(policy_state, mesh, fsdp))
            ref_state = jax.device_put(ref_state, shd.param_shardings(ref_state, mesh, fsdp))
            critic_state = jax.device_put(critic_state, shd.param_shardings(critic_state, mesh, fsdp))
        p, c, r = (nnx.to_pure_dict(s) for s in (policy_state, critic_state, ref_state))
        state = TrainState(
            policy=p, critic=c, ref=r,
            actor_opt=self.actor_tx.init(p), critic_opt=self.critic_tx.init(c),
            step=jnp.zeros((), jnp.int32),
            rng=jax.random.key_data(jax.random.key(seed)))
        # Every leaf its own buffer: the critic's trunk and the reference start as the
        # policy's arrays, and a donated state must not hold one buffer twice.
        self.state = jax.tree.map(jnp.copy, state)
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
        self._update = jax.jit(functools.partial(_ppo_update, self), donate_argnums=(0,),
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
        if self.mesh is not None:
            return distributed.global_batch(batch, self.mesh, BATCH_KEYS)
        return {k: jnp.asarray(np.asarray(batch[k])) for k in BATCH_KEYS}

    def update(self, batch: dict) -> dict:
        """One PPO update on `batch` (every process calls it, with its own rows); returns
        host-side float metrics."""
        batch = self.shard_batch(batch)
        b = batch["tokens"].shape[0]          # global rows
        if b % self.cfg.minibatches:
            raise ValueError(f"batch size {b} is not divisible by minibatches="
                             f"{self.cfg.minibatches}.")
        self.state, metrics = self._update(self.state, batch)
        return {k: float(v) for k, v in jax.device_get(metrics).items()}


def _critic_values(learner: Learner, critic_params, policy_hidden, tokens, attention_mask):
    """Values [B, L-1] of the states before each predicted token."""
    critic = nnx.merge(learner.critic_graph, critic_params)
    if learner.cfg.critic == "shared":
        return critic(policy_hidden)
    return critic(tokens[:, :-1], attention_mask[:, :-1])


def _ppo_update(learner: Learner, state: TrainState, batch: dict):
    cfg = learner.cfg
    tokens, attn = batch["tokens"], batch["attention_mask"]
    chex.assert_rank([tokens, attn, batch["response_mask"], batch["behaviour_logprobs"]], 2)
    chex.assert_rank([batch["rewards"], batch["durations"]], 1)
    mask = batch["response_mask"][:, 1:].astype(jnp.float32)        # [B, L-1]
    old_lp = batch["behaviour_logprobs"][:, 1:].astype(jnp.float32)
    b = tokens.shape[0]

    # 1-3: reference log-probs, old values, rewards, advantages, duration weights.
    ref_lp = policy_logprobs(nnx.merge(learner.policy_graph, state.ref), tokens, attn,
                             cfg.logprob_chunk)
    policy_hidden = None
    if cfg.critic == "shared":
        _, policy_hidden = policy_logprobs(nnx.merge(learner.policy_graph, state.policy), tokens,
                                           attn, cfg.logprob_chunk, return_hidden=True)
    old_values = jax.lax.stop_gradient(
        _critic_values(learner, state.critic, policy_hidden, tokens, attn)) * mask
    kl = losses.kl_penalty(old_lp, jax.lax.stop_gradient(ref_lp), kind=cfg.kl_kind) * mask
    token_r = advantages.token_rewards(batch["rewards"].astype(jnp.float32), mask, kl=kl,
                                       kl_coef=cfg.kl_coef)
    adv, returns = advantages.gae(token_r, old_values, mask, cfg.gamma, cfg.lam)
    if cfg.whiten_advantages:
        adv = advantages.whiten(adv, mask)
    if cfg.duration_weights:
        weights = losses.duration_weights(batch["durations"].astype(jnp.float32),
                                          floor=cfg.duration_floor, cap=cfg.duration_cap)
    else:
        weights = jnp.ones((b,), jnp.float32)

    # 4: epochs x minibatches.
    rng, perm_key = jax.random.split(jax.random.wrap_key_data(state.rng))
    mb = b // cfg.minibatches
    perms = jnp.stack([jax.random.permutation(k, b)
                       for k in jax.random.split(perm_key, cfg.epochs)])
    idx = perms.reshape(cfg.epochs * cfg.minibatches, mb)
    data = dict(tokens=tokens, attn=attn, mask=mask, old_lp=old_lp, adv=adv, returns=returns,
                old_values=old_values, weights=weights)

    def loss_fn(policy_params, critic_params, d):
        policy = nnx.merge(learner.policy_graph, policy_params)
        (lp, ent), h = policy_logprobs(policy, d["tokens"], d["attn"], cfg.logprob_chunk,
                                       return_entropy=True, return_hidden=True)
        pg, aux = losses.policy_loss(lp, d["old_lp"], d["adv"], d["mask"], weights=d["weights"],
                                     clip_eps=cfg.clip_eps, reduction=cfg.reduction)
        entropy = losses.reduce_tokens(ent, d["mask"], cfg.reduction)
        values = _critic_values(learner, critic_params, h, d["tokens"], d["attn"])
        vf, vaux = losses.value_loss(values, d["old_values"], d["returns"], d["mask"],
                                     clip_eps=cfg.value_clip_eps, reduction=cfg.reduction)
        actor = pg - cfg.ent_coef * entropy
        total = actor + cfg.vf_coef * vf if cfg.critic == "shared" else actor + vf
        metrics = dict(aux, vf_loss=vf, entropy=entropy, **vaux)
        return total, metrics

    def step(carry, ix):
        policy_p, critic_p, aopt, copt = carry
        d = jax.tree.map(lambda x: x[ix], data)
        grads, metrics = jax.grad(loss_fn, argnums=(0, 1), has_aux=True)(policy_p, critic_p, d)
        g_policy, g_critic = grads
        upd, aopt = learner.actor_tx.update(g_policy, aopt, policy_p)
        policy_p = optax.apply_updates(policy_p, upd)
        upd, copt = learner.critic_tx.update(g_critic, copt, critic_p)
        critic_p = optax.apply_updates(critic_p, upd)
        metrics = dict(metrics, actor_grad_norm=optax.tree.norm(g_policy),
                       critic_grad_norm=optax.tree.norm(g_critic))
        return (policy_p, critic_p, aopt, copt), metrics

    carry = (state.policy, state.critic, state.actor_opt, state.critic_opt)
    (policy_p, critic_p, aopt, copt), ms = jax.lax.scan(step, carry, idx)
    metrics = {k: jnp.mean(v) for k, v in ms.items()}
    metrics.update(
        kl_ref=advantages.masked_mean(kl, mask),
        advantage_mean=advantages.masked_mean(adv, mask),
        return_mean=advantages.masked_mean(returns, mask),
        value_mean=advantages.masked_mean(old_values, mask),
        reward_mean=jnp.mean(batch["rewards"]),
        duration_weight_max=jnp.max(weights),
        response_tokens=jnp.sum(mask))
    new_state = TrainState(policy=policy_p, critic=critic_p, ref=state.ref, actor_opt=aopt,
                           critic_opt=copt, step=state.step + 1,
                           rng=jax.random.key_data(rng))
    return new_state, metrics
