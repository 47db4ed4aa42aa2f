"""The KV-cache sampler against the uncached forward pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mle_rl import sampling
from mle_rl.models import config as mcfg
from mle_rl.models import draw, qwen2, sharding as shd

CFG = mcfg.ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=16, rope_theta=10000.0,
                       tie_word_embeddings=False)
PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11], [12, 13, 14, 15]]


@pytest.fixture(scope="module")
def model():
    m = qwen2.init_model(CFG, seed=0)
    # Larger weights than the default init so that greedy paths are not constant.
    _, state = jax.tree.map(lambda x: x, qwen2.nnx.split(m))
    for path, var in qwen2.nnx.to_flat_state(state):
        if path[-1].endswith("kernel") or path == ("embed",):
            var.set_value(var.get_value() * 5)
    qwen2.nnx.update(m, state)
    return m


def uncached_argmax_path(model, prompt, generated):
    """Step-by-step argmax of the uncached forward pass along `generated`.

    Step t's argmax depends only on prompt + generated[:t], so one causal forward over the
    whole sequence gives every step's uncached argmax at once (teacher forcing).
    """
    logits = causal_logits(model, list(prompt) + list(generated))
    logits = logits[len(prompt) - 1:len(prompt) - 1 + len(generated)]
    return np.asarray(jnp.argmax(logits, axis=-1)).tolist()


def causal_logits(model, seq, length=128):
    """Uncached logits [len(seq), V] of one sequence. It is right-padded to `length` so that
    every call reuses one compilation: causal attention keeps padding after a position
    from changing that position's logits."""
    assert len(seq) <= length
    tokens = jnp.asarray([list(seq) + [0] * (length - len(seq))], jnp.int32)
    return qwen2.forward(model, tokens)[0, :len(seq)]


@pytest.mark.parametrize("n_new", [12, 80])     # 80 crosses a cache-growth phase (64)
def test_greedy_equals_uncached_argmax(model, n_new):
    out = sampling.generate(model, PROMPTS, max_new_tokens=n_new, rng=0, temperature=0.0)
    assert out.tokens.shape == (len(PROMPTS), n_new)
    assert (out.lengths == n_new).all() and out.mask.all()
    for i, prompt in enumerate(PROMPTS):
        assert out.tokens[i].tolist() == uncached_argmax_path(model, prompt, out.tokens[i])
    # Paths are not trivially constant, so the check has teeth.
    assert len(set(out.tokens.ravel().tolist())) > 4


def test_logprobs_equal_uncached_log_softmax(model):
    out = sampling.generate(model, PROMPTS, max_new_tokens=10, rng=jax.random.key(3),
                            temperature=0.8, top_p=0.9)
    for i, prompt in enumerate(PROMPTS):
        n = int(out.lengths[i])
        logp = jax.nn.log_softmax(causal_logits(model, list(prompt) + out.tokens[i, :n].tolist()),
                                  axis=-1)
        want = logp[len(prompt) - 1:len(prompt) - 1 + n][jnp.arange(n), out.tokens[i, :n]]
        np.testing.assert_allclose(out.logprobs[i, :n], np.asarray(want), atol=1e-4)


def test_eos_stops_rows_and_masks_the_rest(model):
    ref = sampling.generate(model, PROMPTS, max_new_tokens=12, rng=0, temperature=0.0)
    eos = int(ref.tokens[1, 3])            # make row 1's 4th token an EOS
    out = sampling.generate(model, PROMPTS, max_new_tokens=12, rng=0, temperature=0.0,
                            eos_ids=(eos,), pad_id=0)
    for i in range(len(PROMPTS)):
        hits = np.nonzero(ref.tokens[i] == eos)[0]
        n = int(hits[0]) + 1 if len(hits) else 12
        assert out.lengths[i] == n
        assert out.tokens[i, :n].tolist() == ref.tokens[i, :n].tolist()
        assert not out.mask[i, n:].any() and (out.tokens[i, n:] == 0).all()
        assert (out.logprobs[i, n:] == 0).all()
    assert out.lengths[1] == 4


def test_same_bucket_does_not_recompile(model):
    sampling.generate(model, PROMPTS, max_new_tokens=9, rng=0, temperature=1.0)
    before = dict(sampling.TRACE_COUNTS)
    # Other prompts, other lengths and another max_new_tokens, all in the same buckets.
    other = [[7, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [3]]
    sampling.generate(model, other, max_new_tokens=14, rng=1, temperature=0.7)
    assert sampling.TRACE_COUNTS == before
    # A different bucket does compile (the counter works).
    sampling.generate(model, [[1] * 40], max_new_tokens=9, rng=0, temperature=1.0)
    assert sampling.TRACE_COUNTS["prefill"] == before["prefill"] + 1


def test_bad_arguments_are_clear(model):
    with pytest.raises(ValueError, match="no prompts"):
        sampling.generate(model, [], max_new_tokens=4, rng=0)
    with pytest.raises(ValueError, match="at least one token"):
        sampling.generate(model, [[]], max_new_tokens=4, rng=0)
    with pytest.raises(ValueError, match="top_p"):
        sampling.generate(model, [[1]], max_new_tokens=4, rng=0, top_p=0.0)


def test_sampling_is_distributed_as_softmax():
    """Inverse-CDF draws follow softmax(logits / T) (chi-square-free check on a 4-way toy)."""
    logits = jnp.log(jnp.asarray([[0.1, 0.2, 0.3, 0.4]] * 20000))
    u = jax.random.uniform(jax.random.key(0), (20000,))
    tok, _ = draw.sample_token(logits, u, 1.0, 1.0, greedy=False, use_top_p=False)
    freq = np.bincount(np.asarray(tok), minlength=4) / 20000
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.015)
    u = jax.random.uniform(jax.random.key(1), (20000,))
    tok, _ = draw.sample_token(logits, u, 1.0, 0.55, greedy=False, use_top_p=True)
    freq = np.bincount(np.asarray(tok), minlength=4) / 20000   # keeps {0.4, 0.3}
    np.testing.assert_allclose(freq, [0, 0, 3 / 7, 4 / 7], atol=0.015)


def test_greedy_token_is_argmax_with_ties():
    """Greedy picks argmax's token, the first of tied maxima, at the ends of the vocabulary
    too; its log-prob is the log-softmax there."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 300)).astype(np.float32)
    logits[1, [7, 20, 299]] = 9.0          # tie: the first wins
    logits[2, :] = 1.5                      # all tied: index 0
    logits[3, 299] = 9.0                    # the last index
    logits[4, 0] = 9.0                      # the first index
    logits[5, [0, 299]] = 9.0
    tok, lp = draw.sample_token(jnp.asarray(logits), jnp.zeros(6), 1.0, 1.0, greedy=True,
                                use_top_p=False)
    np.testing.assert_array_equal(np.asarray(tok), np.argmax(logits, axis=-1))
    want = jax.nn.log_softmax(jnp.asarray(logits))[np.arange(6), np.argmax(logits, -1)]
    np.testing.assert_allclose(np.asarray(lp), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_two_level_inverse_cdf_matches_one_cumsum():
    """The block-then-entry draw picks the same token as one cumsum over the vocabulary,
    across blocks and in a last, padded block (V = 1000 is not a multiple of the block);
    zero-weight entries are never drawn."""
    rng = np.random.default_rng(0)
    v = 1000
    w = rng.random((64, v)).astype(np.float32) ** 4
    w[:, rng.choice(v, 300, replace=False)] = 0.0
    u = rng.random(64).astype(np.float32)
    got = np.asarray(draw.inverse_cdf(jnp.asarray(w), jnp.asarray(u)))
    cdf = np.cumsum(w.astype(np.float64), axis=1)
    want = np.minimum((cdf < (u[:, None] * cdf[:, -1:])).sum(1), v - 1)
    np.testing.assert_array_equal(got, want)
    assert (w[np.arange(64), got] > 0).all()
    # Mass in the first, a middle and the padded last block: frequencies match.
    w = np.zeros((1, v), np.float32)
    w[0, [3, 500, 999]] = [0.2, 0.5, 0.3]
    u = jax.random.uniform(jax.random.key(2), (20000,))
    tok = np.asarray(draw.inverse_cdf(jnp.broadcast_to(jnp.asarray(w), (20000, v)), u))
    freq = np.bincount(tok, minlength=v)[[3, 500, 999]] / 20000
    np.testing.assert_allclose(freq, [0.2, 0.5, 0.3], atol=0.015)
    assert np.bincount(tok, minlength=v).sum() == 20000 and set(np.unique(tok)) <= {3, 500, 999}


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 (forced) CPU devices")
def test_same_results_on_one_device_and_2x2_mesh(model):
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, (4, 9)), jnp.int32)
    single = np.asarray(qwen2.forward(model, tokens))
    out1 = sampling.generate(model, PROMPTS, max_new_tokens=8, rng=5, temperature=1.0)

    mesh = shd.make_mesh((2, 2), jax.devices()[:4])
    sharded = qwen2.nnx.clone(model)
    shd.shard_model(sharded, mesh)
    q = sharded.layers[0].attn.q_kernel.get_value()
    assert q.sharding.spec == shd.P(None, shd.MODEL)      # really sharded over `model`
    tokens_sh = jax.device_put(tokens, shd.batch_sharding(mesh, 2))
    np.testing.assert_allclose(np.asarray(qwen2.forward(sharded, tokens_sh)), single, atol=1e-5)
    out4 = sampling.generate(sharded, PROMPTS, max_new_tokens=8, rng=5, temperature=1.0,
                             mesh=mesh)
    np.testing.assert_array_equal(out4.tokens, out1.tokens)
    np.testing.assert_allclose(out4.logprobs, out1.logprobs, atol=1e-5)


def test_unknown_decode_compiler_option_falls_back(monkeypatch):
    """The decode loop's XLA:CPU options are experimental flags: a jaxlib that rejects them
    must leave sampling working (no options), not break it."""
    monkeypatch.setattr(sampling, "CPU_DECODE_COMPILER_OPTIONS", {"xla_cpu_no_such_option": "1"})
    fallback = {"xla_cpu_experimental_ynn_fusion_type": ""}
    monkeypatch.setattr(sampling, "CPU_DECODE_FALLBACK_OPTIONS", (fallback,))
    assert sampling._cpu_decode_options() == fallback           # the next one that works
    monkeypatch.setattr(sampling, "CPU_DECODE_FALLBACK_OPTIONS", ({"xla_cpu_no_such": "1"},))
    assert sampling._cpu_decode_options() is None               # none: default options
    monkeypatch.undo()
    if jax.default_backend() == "cpu":
        assert sampling._cpu_decode_options() == sampling.CPU_DECODE_COMPILER_OPTIONS
