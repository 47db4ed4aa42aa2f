"""The jitted PPO learner step: it learns on a fixed batch, and is the same on 1 and 4 devices."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mle_rl.models import config as mcfg
from mle_rl.models import qwen2, sharding as shd
from mle_rl.rl import learner as lrn

CFG = mcfg.ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=8, tie_word_embeddings=True)


@functools.partial(jax.jit, static_argnums=0)
def _logprobs(graphdef, state, tokens, attention_mask):
    return lrn.policy_logprobs(qwen2.nnx.merge(graphdef, state), tokens, attention_mask, 4)


def logprobs(policy, tokens, attention_mask):
    """`lrn.policy_logprobs(policy, tokens, attention_mask, 4)`, jitted (eager dispatch of
    the forward pass compiled op by op: seconds per call)."""
    graphdef, state = qwen2.nnx.split(policy)
    return _logprobs(graphdef, state, jnp.asarray(tokens), jnp.asarray(attention_mask))


def make_batch(policy, b=8, prompt=5, resp=6, seed=0):
    """Sequences: left-padded prompts then responses; half rewarded, half penalised."""
    rng = np.random.default_rng(seed)
    L = prompt + resp
    tokens = rng.integers(1, CFG.vocab_size, (b, L)).astype(np.int32)
    attn = np.ones((b, L), np.int32)
    attn[::3, :2] = 0                      # some left padding
    tokens[attn == 0] = 0
    resp_mask = np.zeros((b, L), np.int32)
    resp_mask[:, prompt:] = 1
    resp_mask[1::4, -2:] = 0               # some sequences end early (right padding)
    attn[1::4, -2:] = 0
    # Behaviour log-probs = the current policy's, as if it had sampled these tokens.
    lp = np.asarray(logprobs(policy, tokens, attn))
    beh = np.zeros((b, L), np.float32)
    beh[:, 1:] = lp * resp_mask[:, 1:]
    rewards = np.where(np.arange(b) % 2 == 0, 1.0, -1.0).astype(np.float32)
    durations = rng.uniform(0.5, 5.0, b).astype(np.float32)
    return dict(tokens=tokens, attention_mask=attn, response_mask=resp_mask,
                behaviour_logprobs=beh, rewards=rewards, durations=durations)


def seq_logprob(learner, batch):
    lp = np.asarray(logprobs(learner.policy(), batch["tokens"], batch["attention_mask"]))
    return (lp * batch["response_mask"][:, 1:]).sum(1)


@pytest.mark.parametrize("critic", ["separate", "shared"])
def test_update_learns_on_a_fixed_batch(critic):
    policy = qwen2.init_model(CFG, seed=1)
    cfg = lrn.PPOConfig(actor_lr=1e-3, critic_lr=1e-3, epochs=2, minibatches=2, kl_coef=0.0,
                        critic=critic, logprob_chunk=4)
    learner = lrn.Learner(policy, cfg, seed=0)
    batch = make_batch(learner.policy())
    before = seq_logprob(learner, batch)
    vf = []
    for _ in range(4):
        m = learner.update(batch)
        vf.append(m["vf_loss"])
        assert np.isfinite(list(m.values())).all()
    after = seq_logprob(learner, batch)
    delta = after - before
    # Rewarded sequences become more likely, penalised ones less likely.
    assert delta[::2].mean() > 0.5 and delta[1::2].mean() < -0.5
    assert vf[-1] < vf[0]
    assert int(learner.state.step) == 4


def test_reference_stays_frozen_and_kl_grows():
    policy = qwen2.init_model(CFG, seed=2)
    learner = lrn.Learner(policy, lrn.PPOConfig(actor_lr=3e-3, kl_coef=0.1, kl_kind="k3",
                                                     logprob_chunk=4))
    ref0 = jax.tree.map(np.asarray, learner.state.ref)
    batch = make_batch(learner.policy())
    m1 = learner.update(batch)
    batch2 = make_batch(learner.policy(), seed=0)   # behaviour = the updated policy
    m2 = learner.update(batch2)
    jax.tree.map(np.testing.assert_array_equal, ref0, jax.tree.map(np.asarray, learner.state.ref))
    assert abs(m1["kl_ref"]) < 1e-5 and m2["kl_ref"] > 1e-4


def test_duration_weights_switch_changes_the_update():
    batch = None
    out = {}
    for on in (True, False):
        policy = qwen2.init_model(CFG, seed=3)
        learner = lrn.Learner(policy, lrn.PPOConfig(actor_lr=1e-2, duration_weights=on,
                                                    logprob_chunk=4))
        batch = batch or make_batch(learner.policy())
        learner.update(batch)
        out[on] = jax.tree.map(np.asarray, learner.state.policy)
    diffs = jax.tree.leaves(jax.tree.map(lambda a, b: np.abs(a - b).max(), out[True], out[False]))
    assert max(diffs) > 1e-6


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 (forced) CPU devices")
def test_same_parameters_on_one_device_and_2x2_mesh():
    cfg = lrn.PPOConfig(actor_lr=1e-3, critic_lr=1e-3, epochs=2, minibatches=2, logprob_chunk=4)
    l1 = lrn.Learner(qwen2.init_model(CFG, seed=4), cfg, seed=7)
    mesh = shd.make_mesh((2, 2), jax.devices()[:4])
    l4 = lrn.Learner(qwen2.init_model(CFG, seed=4), cfg, seed=7, mesh=mesh)
    emb = l4.state.policy["embed"]
    assert emb.sharding.spec == shd.P(shd.MODEL, None)   # vocab over `model`
    batch = make_batch(l1.policy())
    for _ in range(2):
        m1, m4 = l1.update(batch), l4.update(batch)
    for k in ("pg_loss", "vf_loss", "clip_frac", "kl_ref"):
        np.testing.assert_allclose(m1[k], m4[k], atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5),
                 l1.state.policy, l4.state.policy)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5),
                 l1.state.critic, l4.state.critic)


def test_bad_minibatch_count_is_clear():
    learner = lrn.Learner(qwen2.init_model(CFG, seed=5), lrn.PPOConfig(minibatches=3,
                                                                        logprob_chunk=4))
    with pytest.raises(ValueError, match="not divisible by minibatches=3"):
        learner.update(make_batch(learner.policy()))


def _grouped(batch, group_size=4):
    """The batch's rows as groups of `group_size` samples of one prompt (ids 0, 0, 0, 0, 1...)."""
    b = len(batch["rewards"])
    return dict(batch, group_ids=(np.arange(b) // group_size).astype(np.int32))


def _np(tree):
    return jax.tree.map(np.asarray, tree)


@pytest.mark.parametrize("advantage, scale", [("grpo", "group"), ("rloo", "group"),
                                              ("max_at_k", "group"), ("max_at_k", "scores")])
def test_critic_free_builds_no_critic_and_learns(advantage, scale):
    """max_at_k with k = 2 over groups of 4 (two rewarded, two penalised samples): a
    rewarded sample raises the best of two draws, a penalised one lowers it; the same with
    the batch's score spread as the divisor (all valid)."""
    policy = qwen2.init_model(CFG, seed=1)
    cfg = lrn.PPOConfig(actor_lr=1e-3, epochs=2, minibatches=2, kl_coef=0.0,
                        advantage=advantage, logprob_chunk=4, best_of_k=2,
                        best_of_k_scale=scale)
    learner = lrn.Learner(policy, cfg, seed=0)
    assert learner.state.critic is None and learner.state.critic_opt is None
    assert learner.critic_graph is None and learner.critic_tx is None
    sizes = learner.state_bytes()
    assert sizes["critic"] == sizes["critic_opt"] == 0 and sizes["policy"] > 0
    batch = _grouped(make_batch(learner.policy()))
    if scale == "scores":
        assert "valid" in cfg.batch_keys
        batch["valid"] = np.ones_like(batch["rewards"])
    with pytest.raises(ValueError, match="group_ids"):
        learner.update(make_batch(learner.policy()))          # no groups: a clear error
    before = seq_logprob(learner, batch)
    for _ in range(4):
        m = learner.update(batch)
        assert np.isfinite(list(m.values())).all() and "vf_loss" not in m
        assert m["nonfinite_skips"] == 0
    delta = seq_logprob(learner, batch) - before
    assert delta[::2].mean() > 0.5 and delta[1::2].mean() < -0.5


def test_max_at_k_group_of_equal_rewards_gets_no_advantage_despite_kl():
    """With a KL penalty in the reward, a group whose rewards are all equal still has scores
    apart by their KL terms; max_at_k gives it no advantage (the rewards decide the signal),
    while a group whose rewards differ is trained."""
    cfg = lrn.PPOConfig(actor_lr=1e-3, kl_coef=0.05, advantage="max_at_k", best_of_k=2,
                        logprob_chunk=4)
    learner = lrn.Learner(qwen2.init_model(CFG, seed=1), cfg, seed=0)
    learner.update(_grouped(make_batch(learner.policy())))   # the policy leaves its reference
    batch = _grouped(make_batch(learner.policy(), seed=3))
    batch["rewards"] = np.full_like(batch["rewards"], 0.5)    # both groups: no signal
    m = learner.update(batch)
    assert m["adv_zero_frac"] == 1.0
    batch["rewards"][4:] = np.array([0.1, 0.9, 0.5, 0.3], batch["rewards"].dtype)
    m = learner.update(batch)
    assert m["adv_zero_frac"] == 0.5


def test_critic_free_update_jaxpr_has_no_value_forward():
    """GRPO's compiled update is smaller than GAE's: no critic trunk, no value head."""
    out = {}
    for adv in ("gae", "grpo"):
        learner = lrn.Learner(qwen2.init_model(CFG, seed=1),
                              lrn.PPOConfig(advantage=adv, logprob_chunk=4), seed=0)
        batch = learner.shard_batch(_grouped(make_batch(learner.policy())))
        jaxpr = jax.make_jaxpr(functools.partial(lrn._ppo_update, learner))(learner.state, batch)
        out[adv] = str(jaxpr).count("dot_general")
    assert out["grpo"] < out["gae"]


def _broken(batch, what):
    b = {k: np.array(v, copy=True) for k, v in batch.items()}
    if what == "nan_reward":
        b["rewards"][3] = np.nan
    elif what == "nan_logprob":
        b["behaviour_logprobs"][2, 7] = np.nan
    elif what == "inf_logprob":
        b["behaviour_logprobs"][2, 7] = -np.inf              # with a KL penalty in the reward
    return b


@pytest.mark.parametrize("advantage, what", [("gae", "nan_reward"), ("grpo", "nan_logprob"),
                                             ("gae", "inf_logprob"), ("rloo", "nan_reward")])
def test_non_finite_step_is_skipped_bit_identically_then_training_continues(advantage, what):
    cfg = lrn.PPOConfig(actor_lr=1e-3, critic_lr=1e-3, kl_coef=0.05, advantage=advantage,
                        logprob_chunk=4)
    learner = lrn.Learner(qwen2.init_model(CFG, seed=6), cfg, seed=0)
    batch = _grouped(make_batch(learner.policy()))
    learner.update(batch)                                     # Adam moments are non-zero
    before = _np(learner.state)
    m = learner.update(_broken(batch, what))
    assert m["nonfinite_skips"] == 1 and m["update_skipped"] == 1
    after = _np(learner.state)
    for part in ("policy", "critic", "actor_opt", "critic_opt", "ref"):
        jax.tree.map(lambda x, y: np.testing.assert_array_equal(x, y),
                     getattr(before, part), getattr(after, part))
    assert int(after.step) == int(before.step) + 1           # counted as a policy version
    m = learner.update(batch)                                 # and the run goes on
    assert m["nonfinite_skips"] == 0 and np.isfinite(m["pg_loss"])
    changed = jax.tree.map(lambda x, y: bool((x != y).any()), after.policy,
                           _np(learner.state.policy))
    assert any(jax.tree.leaves(changed))


def test_inf_logprob_without_kl_penalty_is_clamped_not_skipped():
    """With no KL in the reward an inf behaviour log-prob only meets the ±20 log-ratio clamp:
    the update is finite, taken, and that token carries no gradient."""
    learner = lrn.Learner(qwen2.init_model(CFG, seed=6),
                          lrn.PPOConfig(actor_lr=1e-3, kl_coef=0.0, logprob_chunk=4), seed=0)
    m = learner.update(_broken(make_batch(learner.policy()), "inf_logprob"))
    assert m["nonfinite_skips"] == 0 and np.isfinite(m["pg_loss"])
    assert np.isclose(m["ratio_max"], np.exp(20.0), rtol=1e-4)
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(_np(learner.state.policy)))


def test_grad_norms_and_clip_value_are_logged():
    learner = lrn.Learner(qwen2.init_model(CFG, seed=7),
                          lrn.PPOConfig(max_grad_norm=1e-4, logprob_chunk=4), seed=0)
    m = learner.update(make_batch(learner.policy()))
    assert m["max_grad_norm"] == pytest.approx(1e-4)
    assert m["actor_grad_norm"] > 1e-4 and m["critic_grad_norm"] > 0
    assert m["grad_clipped"] == 1.0


def test_adaptive_kl_coefficient_lives_in_the_state_and_follows_the_target():
    cfg = lrn.PPOConfig(actor_lr=3e-3, kl_coef=0.1, kl_kind="k3", kl_ctrl="adaptive",
                        kl_target=1e-6, kl_horizon=10.0, logprob_chunk=4)
    learner = lrn.Learner(qwen2.init_model(CFG, seed=2), cfg)
    assert float(learner.state.kl_coef) == pytest.approx(0.1)
    m1 = learner.update(make_batch(learner.policy()))
    assert m1["kl_coef"] == pytest.approx(0.1)
    # Behaviour = reference: KL 0 < target, so β shrinks by the full 20% x n/horizon.
    assert float(learner.state.kl_coef) == pytest.approx(0.1 * (1 - 0.2 * 8 / 10.0), rel=1e-5)
    learner.update(make_batch(learner.policy(), seed=0))     # now the policy has moved
    m3 = learner.update(make_batch(learner.policy(), seed=0))
    assert m3["kl_ref_seq"] > 1e-6 and float(learner.state.kl_coef) > m3["kl_coef"]


def test_kl_loss_adds_a_term_on_the_current_policy():
    out = {}
    for use in (False, True):
        cfg = lrn.PPOConfig(actor_lr=3e-3, kl_coef=0.0, use_kl_loss=use, kl_loss_coef=1.0,
                            advantage="grpo", logprob_chunk=4)
        learner = lrn.Learner(qwen2.init_model(CFG, seed=3), cfg)
        batch = _grouped(make_batch(learner.policy()))
        learner.update(batch)
        out[use] = learner.update(batch)
    assert "kl_loss" in out[True] and "kl_loss" not in out[False]
    assert out[True]["kl_loss"] > 0


def _pointers(tree):
    return [x.unsafe_buffer_pointer() for x in jax.tree.leaves(tree)]


@pytest.mark.parametrize("critic,advantage", [("separate", "gae"), ("shared", "grpo")])
def test_state_leaves_own_their_buffers_and_the_caller_keeps_its_model(critic, advantage):
    """No two leaves of the (donated) state share a buffer: the reference and a separate
    critic's trunk start as the policy's weights and are copied. By default the caller's
    model is copied too and stays usable after an update; with `take_model=True` the state
    holds the model's own arrays (the weights are not held twice at the build) and the first
    update donates them."""
    cfg = lrn.PPOConfig(critic=critic, advantage=advantage, logprob_chunk=4)
    batch = make_batch(qwen2.init_model(CFG, seed=8))
    batch["group_ids"] = np.repeat(np.arange(4), 2).astype(np.int32)
    model_leaves = lambda m: jax.tree.leaves(qwen2.nnx.state(m))

    kept = qwen2.init_model(CFG, seed=8)
    learner = lrn.Learner(kept, cfg, seed=0)
    ptrs = _pointers(learner.state)
    assert len(ptrs) == len(set(ptrs))
    assert not set(ptrs) & set(_pointers(model_leaves(kept)))
    learner.update(batch)
    assert not any(x.is_deleted() for x in model_leaves(kept))
    np.testing.assert_allclose(np.asarray(logprobs(kept, batch["tokens"], batch["attention_mask"])),
                               np.asarray(logprobs(qwen2.init_model(CFG, seed=8),
                                                   batch["tokens"], batch["attention_mask"])))

    taken = qwen2.init_model(CFG, seed=8)
    learner2 = lrn.Learner(taken, cfg, seed=0, take_model=True)
    ptrs2 = _pointers(learner2.state)
    assert len(ptrs2) == len(set(ptrs2))
    assert set(_pointers(learner2.state.policy)) == set(_pointers(model_leaves(taken)))
    m2 = learner2.update(batch)
    assert all(x.is_deleted() for x in model_leaves(taken))    # donated
    # Same numbers either way.
    m1 = lrn.Learner(qwen2.init_model(CFG, seed=8), cfg, seed=0).update(batch)
    assert m1 == pytest.approx(m2, rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("weights", [True, False])
def test_update_leaves_each_rows_advantage_and_duration_weight(weights):
    """`last_per_seq`: GRPO without KL in the reward -> each row's advantage is its group's
    normalised reward; the weight is its duration (floored at 1 s) over the batch mean, or
    1 without duration weights."""
    cfg = lrn.PPOConfig(actor_lr=1e-3, kl_coef=0.0, advantage="grpo", logprob_chunk=4,
                        duration_weights=weights, duration_floor=1.0)
    learner = lrn.Learner(qwen2.init_model(CFG, seed=1), cfg, seed=0)
    batch = _grouped(make_batch(learner.policy()))
    batch["rewards"] = np.array([1, 0, 0, 0, 2, 2, 0, 0], np.float32)
    learner.update(batch)
    per = learner.last_per_seq
    assert set(per) == {"advantage", "weight"} and per["advantage"].shape == (8,)
    r = batch["rewards"].reshape(2, 4)
    want = (r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(per["advantage"], want.ravel(), rtol=1e-4, atol=1e-5)
    d = np.maximum(batch["durations"], 1.0)
    np.testing.assert_allclose(per["weight"], d / d.mean() if weights else np.ones(8),
                               rtol=1e-5)
