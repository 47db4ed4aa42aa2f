"""`dense(x, w)`: the matmul of every projection (and of the loss's LM head), with a
gradient that suits XLA:CPU."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from mle_rl.models import cpu_kernels


def dense(x: jax.Array, w, f32_out: bool = False) -> jax.Array:
    """x [..., D] @ w [D, F], with a float32 result when `f32_out` (logits).

    `w` may be a `cpu_kernels.Packed` matrix (the sampler's CPU decode loop packs its
    weights once per call): then the native few-row kernel computes it (no gradient).

    On CPU the gradient computes dW = x^T dy from an explicitly transposed copy of x, so
    XLA:CPU runs a plain [D, N] x [N, F] product. Left to itself it folds the transpose
    into a [N, D]^T x [N, F] product, which ran at half the speed (42 vs 81 GFLOP/s on one
    core for the tiny model's MLP at 8 x 512 tokens). Other backends use plain autodiff."""
    if isinstance(w, cpu_kernels.Packed):
        return cpu_kernels.packed_matmul(x, w)
    if jax.default_backend() == "cpu":
        return _dense_cpu(x, w, f32_out)
    return _matmul(x, w, f32_out)


def _matmul(x, w, f32_out):
    return jnp.matmul(x, w, preferred_element_type=jnp.float32 if f32_out else None)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _dense_cpu(x, w, f32_out):
    return _matmul(x, w, f32_out)


def _dense_fwd(x, w, f32_out):
    return _matmul(x, w, f32_out), (x, w)


def _dense_bwd(f32_out, res, g):
    x, w = res
    dx = jnp.einsum("...f,df->...d", g.astype(x.dtype), w)
    x2 = x.reshape(-1, x.shape[-1])
    g2 = g.reshape(-1, g.shape[-1]).astype(x.dtype)
    # dW = x^T g with one operand transposed explicitly (a real copy behind a barrier, so
    # XLA does not fold it back into the dot): the narrower of x and g. When g is the
    # narrower one, (g^T x)^T is computed and the small [F, D] result is transposed.
    # The barriers also keep a caller's transpose of dW (a tied embedding's gradient)
    # out of the product.
    if g2.shape[-1] <= x2.shape[-1]:
        g_t = jax.lax.optimization_barrier(jnp.transpose(g2))
        dw_t = jax.lax.optimization_barrier(
            jnp.matmul(g_t, x2, preferred_element_type=jnp.float32))
        dw = jnp.transpose(dw_t)
    else:
        x_t = jax.lax.optimization_barrier(jnp.transpose(x2))
        dw = jnp.matmul(x_t, g2, preferred_element_type=jnp.float32)
    return dx.astype(x.dtype), jax.lax.optimization_barrier(dw.astype(w.dtype))


_dense_cpu.defvjp(_dense_fwd, _dense_bwd)
