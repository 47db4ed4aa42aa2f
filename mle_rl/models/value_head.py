"""The critic: a scalar value head, over its own copy of the trunk or over the policy's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from mle_rl.models.qwen2 import Qwen2


class ValueHead(nnx.Module):
    """v = h @ w + b: [..., D] -> [...] float32. Zero-initialised, so V starts at 0."""

    def __init__(self, hidden_size: int, *, param_dtype=jnp.float32):
        self.kernel = nnx.Param(jnp.zeros((hidden_size,), param_dtype), axes=("embed",))
        self.bias = nnx.Param(jnp.zeros((), param_dtype), axes=())

    def __call__(self, h: jax.Array) -> jax.Array:
        return (jnp.einsum("...d,d->...", h.astype(jnp.float32),
                           self.kernel[...].astype(jnp.float32)) + self.bias[...].astype(jnp.float32))


class Critic(nnx.Module):
    """A value model: its own Qwen2 trunk (initialised as a copy of the policy) + a head."""

    def __init__(self, trunk: Qwen2):
        self.trunk = trunk
        self.head = ValueHead(trunk.config.hidden_size)

    def __call__(self, tokens: jax.Array, attention_mask: jax.Array | None = None) -> jax.Array:
        """tokens [B, T] -> values [B, T] float32 (value of the state after token t)."""
        h, _ = self.trunk.hidden_states(tokens, attention_mask)
        return self.head(h)
