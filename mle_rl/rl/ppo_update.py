"""The PPO update step `(state, batch) -> (state, metrics)`, jitted and donated by `Learner`.

Read top to bottom, it is the whole algorithm (`learner.py` has the batch layout):
  * `_prepare`: reference log-probs, token rewards with the (fixed or adaptive) KL penalty,
    advantages (GAE with a critic, or critic-free GRPO / RLOO / max@k over each prompt's
    samples),
    duration weights;
  * `_loss`: dual-clip PPO surrogate, entropy bonus, optional KL loss, and with a critic the
    clipped value loss;
  * `_step`: one guarded optimizer step: if the loss or a gradient is not finite, the
    parameters and optimizer states are kept bit for bit (`jnp.where` on every leaf) and the
    step is counted as skipped; the global gradient norms are logged either way;
  * `ppo_update`: `epochs × minibatches` steps in one `lax.scan`, then the metrics.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from mle_rl.models.qwen2 import Qwen2
from mle_rl.rl import advantages as adv_lib
from mle_rl.rl import group_advantages as group_adv
from mle_rl.rl import kl as rl_kl
from mle_rl.rl import losses


class TrainState(NamedTuple):
    policy: Any          # pure dict of the policy parameters
    critic: Any          # pure dict: Critic (trunk + head) or ValueHead (shared); None: critic-free
    ref: Any             # pure dict, frozen reference policy
    actor_opt: Any
    critic_opt: Any      # None when critic-free
    step: jax.Array      # int32 scalar: number of updates done (= policy version)
    rng: jax.Array       # PRNG key data, uint32 [2]
    kl_coef: Any = None  # float32 scalar β with kl_ctrl=adaptive; None when fixed


def policy_logprobs(policy: Qwen2, tokens, attention_mask, chunk: int, return_entropy=False,
                    return_hidden=False):
    """log π(token_t | tokens_<t) for t = 1..L-1: [B, L-1] (and entropy, hidden)."""
    h, _ = policy.hidden_states(tokens[:, :-1], attention_mask[:, :-1])
    out = losses.chunked_token_logprobs(h, policy.lm_head_kernel(), tokens[:, 1:],
                                        chunk_size=chunk, return_entropy=return_entropy)
    if return_hidden:
        return out, h
    return out


def _critic_values(learner, critic_params, policy_hidden, tokens, attention_mask):
    """Values [B, L-1] of the states before each predicted token."""
    critic = nnx.merge(learner.critic_graph, critic_params)
    if learner.cfg.critic == "shared":
        return critic(policy_hidden)
    return critic(tokens[:, :-1], attention_mask[:, :-1])


def _prepare(learner, state: TrainState, batch: dict):
    """-> (data for the minibatch steps [B, ...], metrics, next β)."""
    cfg = learner.cfg
    tokens, attn = batch["tokens"], batch["attention_mask"]
    mask = batch["response_mask"][:, 1:].astype(jnp.float32)        # [B, L-1]
    old_lp = batch["behaviour_logprobs"][:, 1:].astype(jnp.float32)
    b = tokens.shape[0]
    ref_lp = jax.lax.stop_gradient(policy_logprobs(
        nnx.merge(learner.policy_graph, state.ref), tokens, attn, cfg.logprob_chunk))
    beta = state.kl_coef if cfg.kl_ctrl == "adaptive" else jnp.float32(cfg.kl_coef)
    kl = rl_kl.kl_penalty(old_lp, ref_lp, kind=cfg.kl_kind, mask=mask)
    in_reward = cfg.kl_ctrl == "adaptive" or cfg.kl_coef != 0   # verl use_kl_in_reward
    token_r = adv_lib.token_rewards(batch["rewards"].astype(jnp.float32), mask,
                                    kl=kl if in_reward else None, kl_coef=beta)
    data = dict(tokens=tokens, attn=attn, mask=mask, old_lp=old_lp)
    metrics = {}
    if cfg.critic_free:
        scores = adv_lib.sequence_scores(token_r, mask)
        group_ids = batch["group_ids"].astype(jnp.int32)
        if cfg.advantage == "grpo":
            seq_adv = group_adv.grpo(scores, group_ids, normalize_std=cfg.grpo_std)
        elif cfg.advantage == "max_at_k":
            # A group whose rewards are all equal carries no signal, however its KL
            # penalties differ (group_advantages.max_at_k's ``signal``).
            seq_adv = group_adv.max_at_k(scores, group_ids, cfg.best_of_k,
                                         normalize_std=cfg.grpo_std,
                                         signal=batch["rewards"].astype(jnp.float32),
                                         mean_coef=cfg.best_of_k_mean_coef,
                                         valid=batch.get("valid"),
                                         valid_coef=cfg.best_of_k_valid_coef,
                                         scale=cfg.best_of_k_scale)
        else:
            seq_adv = group_adv.rloo(scores, group_ids)
        adv = adv_lib.broadcast_sequence_advantage(seq_adv, mask)
        metrics["adv_zero_frac"] = jnp.mean((jnp.abs(seq_adv) < 1e-6).astype(jnp.float32))
    else:
        policy_hidden = None
        if cfg.critic == "shared":
            _, policy_hidden = policy_logprobs(nnx.merge(learner.policy_graph, state.policy),
                                               tokens, attn, cfg.logprob_chunk,
                                               return_hidden=True)
        old_values = jax.lax.stop_gradient(
            _critic_values(learner, state.critic, policy_hidden, tokens, attn)) * mask
        adv, returns = adv_lib.gae(token_r, old_values, mask, cfg.gamma, cfg.lam)
        if cfg.whiten_advantages:
            adv = adv_lib.whiten(adv, mask)
        data.update(returns=returns, old_values=old_values)
        metrics.update(return_mean=adv_lib.masked_mean(returns, mask),
                       value_mean=adv_lib.masked_mean(old_values, mask))
    if cfg.use_kl_loss:
        data["ref_lp"] = ref_lp
    if cfg.duration_weights:
        weights = losses.duration_weights(batch["durations"].astype(jnp.float32),
                                          floor=cfg.duration_floor, cap=cfg.duration_cap)
    else:
        weights = jnp.ones((b,), jnp.float32)
    data.update(adv=adv, weights=weights)
    next_beta = state.kl_coef
    if cfg.kl_ctrl == "adaptive":
        current_kl = rl_kl.sequence_mean_kl(kl, mask)
        next_beta = rl_kl.adaptive_kl_coef(beta, current_kl, cfg.kl_target, cfg.kl_horizon, b)
        metrics["kl_ref_seq"] = current_kl
    # Each sequence's credit, for the trainer's per-family log (learner.update keeps these
    # [B] arrays apart from the scalar metrics): its advantage (the mean over its tokens
    # under GAE) and its duration weight.
    metrics["per_seq/advantage"] = (jnp.sum(adv * mask, 1) / jnp.maximum(jnp.sum(mask, 1), 1.0))
    metrics["per_seq/weight"] = weights
    metrics.update(kl_ref=adv_lib.masked_mean(kl, mask), kl_coef=beta,
                   advantage_mean=adv_lib.masked_mean(adv, mask),
                   reward_mean=jnp.mean(batch["rewards"]),
                   duration_weight_max=jnp.max(weights), response_tokens=jnp.sum(mask))
    return data, metrics, next_beta


def _loss(learner, policy_params, critic_params, d: dict):
    """The minibatch loss -> (total, metrics)."""
    cfg = learner.cfg
    scale = cfg.loss_scale_factor
    policy = nnx.merge(learner.policy_graph, policy_params)
    (lp, ent), h = policy_logprobs(policy, d["tokens"], d["attn"], cfg.logprob_chunk,
                                   return_entropy=True, return_hidden=True)
    pg, aux = losses.policy_loss(lp, d["old_lp"], d["adv"], d["mask"], weights=d["weights"],
                                 clip_eps=cfg.clip_eps, clip_eps_high=cfg.clip_eps_high,
                                 clip_ratio_c=cfg.clip_ratio_c, reduction=cfg.reduction,
                                 scale=scale)
    entropy = losses.reduce_tokens(ent, d["mask"], cfg.reduction, scale)
    actor = pg - cfg.ent_coef * entropy
    metrics = dict(aux, entropy=entropy)
    if cfg.use_kl_loss:
        kl_loss = losses.reduce_tokens(
            rl_kl.kl_penalty(lp, d["ref_lp"], kind=cfg.kl_loss_kind), d["mask"], cfg.reduction,
            scale)
        actor = actor + cfg.kl_loss_coef * kl_loss
        metrics["kl_loss"] = kl_loss
    if cfg.critic_free:
        return actor, metrics
    values = _critic_values(learner, critic_params, h, d["tokens"], d["attn"])
    vf, vaux = losses.value_loss(values, d["old_values"], d["returns"], d["mask"],
                                 clip_eps=cfg.value_clip_eps, reduction=cfg.reduction,
                                 scale=scale)
    total = actor + cfg.vf_coef * vf if cfg.critic == "shared" else actor + vf
    return total, dict(metrics, vf_loss=vf, **vaux)


def _keep_if(ok, new, old):
    """`new` where `ok`, else `old`, leaf by leaf (bit-identical to `old` when not ok)."""
    return jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, old)


def _step(learner, data: dict, carry, ix):
    """One guarded optimizer step on the minibatch rows `ix`."""
    cfg = learner.cfg
    policy_p, critic_p, aopt, copt = carry
    d = jax.tree.map(lambda x: x[ix], data)
    argnums = (0,) if cfg.critic_free else (0, 1)
    (loss, metrics), grads = jax.value_and_grad(
        lambda p, c: _loss(learner, p, c, d), argnums=argnums, has_aux=True)(policy_p, critic_p)
    g_norm = optax.global_norm(grads[0])
    ok = jnp.isfinite(loss) & jnp.isfinite(g_norm)
    metrics = dict(metrics, actor_grad_norm=g_norm)
    upd, new_aopt = learner.actor_tx.update(grads[0], aopt, policy_p)
    new_policy = optax.apply_updates(policy_p, upd)
    if not cfg.critic_free:
        c_norm = optax.global_norm(grads[1])
        ok = ok & jnp.isfinite(c_norm)
        metrics["critic_grad_norm"] = c_norm
        upd, new_copt = learner.critic_tx.update(grads[1], copt, critic_p)
        critic_p, copt = _keep_if(ok, (optax.apply_updates(critic_p, upd), new_copt),
                                  (critic_p, copt))
    policy_p, aopt = _keep_if(ok, (new_policy, new_aopt), (policy_p, aopt))
    metrics["skipped"] = 1.0 - ok.astype(jnp.float32)
    metrics["grad_clipped"] = (g_norm > cfg.max_grad_norm).astype(jnp.float32)
    return (policy_p, critic_p, aopt, copt), metrics


def _mean_over_taken(ms: dict) -> dict:
    """Each metric's mean over the steps that were taken (over all when none was)."""
    taken = 1.0 - ms["skipped"]
    n = jnp.sum(taken)
    out = {}
    for k, v in ms.items():
        if k == "skipped":
            continue
        over_taken = jnp.sum(jnp.where(taken > 0, v, 0.0)) / jnp.maximum(n, 1.0)
        out[k] = jnp.where(n > 0, over_taken, jnp.mean(v))
    out["nonfinite_skips"] = jnp.sum(ms["skipped"])
    out["update_skipped"] = (n == 0).astype(jnp.float32)
    return out


def ppo_update(learner, state: TrainState, batch: dict):
    cfg = learner.cfg
    data, pre_metrics, next_beta = _prepare(learner, state, batch)
    b = batch["tokens"].shape[0]
    rng, perm_key = jax.random.split(jax.random.wrap_key_data(state.rng))
    mb = b // cfg.minibatches
    perms = jnp.stack([jax.random.permutation(k, b)
                       for k in jax.random.split(perm_key, cfg.epochs)])
    idx = perms.reshape(cfg.epochs * cfg.minibatches, mb)
    carry = (state.policy, state.critic, state.actor_opt, state.critic_opt)
    (policy_p, critic_p, aopt, copt), ms = jax.lax.scan(
        lambda c, ix: _step(learner, data, c, ix), carry, idx)
    metrics = dict(_mean_over_taken(ms), **pre_metrics)
    metrics["max_grad_norm"] = jnp.float32(cfg.max_grad_norm)
    new_state = TrainState(policy=policy_p, critic=critic_p, ref=state.ref, actor_opt=aopt,
                           critic_opt=copt, step=state.step + 1,
                           rng=jax.random.key_data(rng), kl_coef=next_beta)
    return new_state, metrics
