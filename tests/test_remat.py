"""Gradient checkpointing (`--remat`, `Qwen2.remat`): the same gradients and the same PPO
update, with each decoder layer recomputed in the backward pass instead of stored."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mle_rl.models import config as mcfg
from mle_rl.models import qwen2
from mle_rl.rl.learner import Learner, PPOConfig

CFG = mcfg.micro()


def _tokens(b=3, t=12, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, CFG.vocab_size, (b, t)).astype(np.int32)
    mask = np.ones((b, t), np.int32)
    mask[0, :4] = 0                                           # left padding
    return jnp.asarray(tokens), jnp.asarray(mask)


def _loss_and_grads(remat: bool):
    model = qwen2.init_model(CFG, seed=1)
    model.remat = remat
    graphdef, state = nnx.split(model)
    tokens, mask = _tokens()

    def loss(state):
        logits = nnx.merge(graphdef, state)(tokens, mask)
        lp = jax.nn.log_softmax(logits[:, :-1], -1)
        picked = jnp.take_along_axis(lp, tokens[:, 1:, None], -1)[..., 0]
        return -(picked * mask[:, 1:]).sum() / mask[:, 1:].sum()

    return jax.value_and_grad(loss)(state)


def test_remat_gives_the_same_loss_and_gradients():
    loss_a, grads_a = _loss_and_grads(False)
    loss_b, grads_b = _loss_and_grads(True)
    np.testing.assert_allclose(float(loss_b), float(loss_a), rtol=1e-6)
    flat_a, flat_b = jax.tree.leaves(grads_a), jax.tree.leaves(grads_b)
    assert len(flat_a) == len(flat_b) > 0
    assert max(float(jnp.abs(g).max()) for g in flat_a) > 1e-4      # gradients are not ~0
    for a, b in zip(flat_a, flat_b):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)


def test_remat_puts_each_layer_under_a_checkpoint_and_only_when_asked():
    def grad_jaxpr(remat):
        model = qwen2.init_model(CFG, seed=1)
        model.remat = remat
        graphdef, state = nnx.split(model)
        tokens, mask = _tokens()
        f = jax.grad(lambda s: nnx.merge(graphdef, s)(tokens, mask).sum())
        return jax.make_jaxpr(f)(state).jaxpr

    def checkpoints(jaxpr):
        return sum(1 for e in _walk(jaxpr) if e.primitive.name in ("checkpoint", "remat", "remat2"))

    assert checkpoints(grad_jaxpr(False)) == 0
    # jax.checkpoint (primitive `remat2`) around each layer, kept in the backward pass
    assert checkpoints(grad_jaxpr(True)) == CFG.num_layers


def _walk(jaxpr):
    for e in jaxpr.eqns:
        yield e
        for p in e.params.values():
            for sub in (p if isinstance(p, (list, tuple)) else [p]):
                inner = getattr(sub, "jaxpr", None)
                if inner is not None:
                    yield from _walk(getattr(inner, "jaxpr", inner))


def test_cached_decoding_ignores_remat():
    model = qwen2.init_model(CFG, seed=1)
    tokens, mask = _tokens(b=2, t=6)
    cache = model.init_cache(2, 8)
    plain = model.hidden_states(tokens, mask, cache=cache, cache_index=0,
                                key_valid=jnp.pad(mask.astype(bool), ((0, 0), (0, 2))))[0]
    model.remat = True
    again = model.hidden_states(tokens, mask, cache=model.init_cache(2, 8), cache_index=0,
                                key_valid=jnp.pad(mask.astype(bool), ((0, 0), (0, 2))))[0]
    np.testing.assert_array_equal(np.asarray(again), np.asarray(plain))


def _batch(policy, b=4, prompt=5, resp=6, seed=0):
    """Left-padded prompts then responses, behaviour log-probs = the policy's own."""
    rng = np.random.default_rng(seed)
    L = prompt + resp
    tokens = rng.integers(1, CFG.vocab_size, (b, L)).astype(np.int32)
    attn = np.ones((b, L), np.int32)
    attn[::3, :2] = 0
    tokens[attn == 0] = 0
    resp_mask = np.zeros((b, L), np.int32)
    resp_mask[:, prompt:] = 1
    logits = policy(jnp.asarray(tokens), jnp.asarray(attn))
    lp = np.asarray(jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1], -1),
                                        jnp.asarray(tokens)[:, 1:, None], -1)[..., 0])
    beh = np.zeros((b, L), np.float32)
    beh[:, 1:] = lp * resp_mask[:, 1:]
    return dict(tokens=tokens, attention_mask=attn, response_mask=resp_mask,
                behaviour_logprobs=beh,
                rewards=np.where(np.arange(b) % 2 == 0, 1.0, -1.0).astype(np.float32),
                durations=rng.uniform(0.5, 5.0, b).astype(np.float32))


def test_the_learner_builds_its_policy_with_remat_only_when_asked():
    """PPOConfig.remat (what --remat sets) reaches the policy the learner differentiates."""
    for remat in (False, True):
        learner = Learner(qwen2.init_model(CFG, seed=2), PPOConfig(remat=remat), seed=0)
        assert learner.policy().remat is remat


@pytest.mark.slow
def test_ppo_update_with_remat_matches_without():
    """The learner's update (PPOConfig.remat, what --remat sets): same parameters, critic
    and metrics after one update (2 minibatches) as without gradient checkpointing. Slow
    (two compiled updates, ~40 s on 2 slow cores; launch/slow_tests.sh runs it): CI checks
    the same loss and gradients through the model (test_remat_gives_the_same_loss_and_gradients)
    and that the learner's policy carries the setting (the test above)."""
    start = jax.device_get(nnx.to_pure_dict(nnx.split(qwen2.init_model(CFG, seed=2))[1]))
    results = []
    for remat in (False, True):
        policy = qwen2.init_model(CFG, seed=2)
        batch = _batch(policy)
        learner = Learner(policy, PPOConfig(remat=remat, minibatches=2), seed=0)
        assert learner.policy().remat is remat
        metrics = learner.update(batch)
        results.append((metrics, jax.device_get(learner.state.policy),
                        jax.device_get(learner.state.critic)))
    (m_a, p_a, c_a), (m_b, p_b, c_b) = results
    moved = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                for a, b in zip(jax.tree.leaves(p_a), jax.tree.leaves(start)))
    assert moved > 1e-6                                          # the update changed something
    for a, b in zip(jax.tree.leaves((p_a, c_a)), jax.tree.leaves((p_b, c_b))):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)
    assert set(m_a) == set(m_b)
    for k in m_a:
        np.testing.assert_allclose(m_b[k], m_a[k], rtol=1e-4, atol=1e-6, err_msg=k)
