"""`models.linear.dense`: the projection matmul with a CPU-friendly weight gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mle_rl.models.linear import dense


# Outputs wider than the input (dW from x^T) and narrower (dW from (g^T x)^T).
@pytest.mark.parametrize("out", [24, 8])
@pytest.mark.parametrize("shape", [(3, 7, 16), (5, 16)])
def test_dense_value_and_gradients_match_plain_matmul(shape, out):
    kx, kw, kg = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, shape)
    w = jax.random.normal(kw, (16, out))
    cot = jax.random.normal(kg, shape[:-1] + (out,))

    def loss(f, x, w):
        return jnp.sum(f(x, w) * cot)

    ours = jax.jit(jax.value_and_grad(lambda x, w: loss(dense, x, w), argnums=(0, 1)))(x, w)
    ref = jax.value_and_grad(lambda x, w: loss(jnp.matmul, x, w), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5)
    for a, b in zip(ours[1], ref[1]):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_dense_gradient_through_a_transposed_kernel():
    """A tied LM head passes `embedding.T`; the gradient must reach the embedding as [V, D]."""
    kx, ke = jax.random.split(jax.random.key(1))
    h = jax.random.normal(kx, (2, 5, 8))
    emb = jax.random.normal(ke, (32, 8))
    f = lambda e: jnp.sum(jax.nn.log_softmax(dense(h, e.T, f32_out=True)) ** 2)
    g = lambda e: jnp.sum(jax.nn.log_softmax(h @ e.T) ** 2)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(emb), jax.grad(g)(emb), rtol=1e-4, atol=1e-4)


def test_dense_f32_out_on_bfloat16_inputs():
    x = jnp.ones((4, 8), jnp.bfloat16)
    w = jnp.full((8, 3), 0.5, jnp.bfloat16)
    y = dense(x, w, f32_out=True)
    assert y.dtype == jnp.float32
    np.testing.assert_allclose(y, 4.0)
    dx, dw = jax.grad(lambda x, w: jnp.sum(dense(x, w, f32_out=True)), argnums=(0, 1))(x, w)
    assert dx.dtype == jnp.bfloat16 and dw.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(dw, np.float32), 4.0)
