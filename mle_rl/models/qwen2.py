"""The Qwen2 / Qwen2.5 causal language model in Flax NNX.

Token embedding -> L x [RMSNorm -> GQA attention (q/k/v biases, rotary) -> residual ->
RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> LM head (tied or untied).

Kernels are stored `[in, out]` (HF Linear weights are `[out, in]`; `hf.py` transposes).
Every parameter carries logical axis names in its `axes` metadata; `sharding.py` maps
them onto a mesh.

One code path serves three uses:
* `model(tokens)`: uncached forward, causal mask (plus an optional padding mask).
* prefill / decode with a KV cache per layer: keys transposed, `[B, kv_heads, head_dim, S]`,
  values `[B, kv_heads, S, head_dim]`. Both products of a decode step then read the cache
  in its stored order: q [G, hd] @ K^T [hd, S] (on CPU, hd multiply-adds over rows of K^T;
  see `Attention._attend`) and p [G, S] @ V [S, hd]. With keys as [.., S, hd] the q.K^T
  product ran 1.5-3x slower on XLA:CPU at batch 16 (and [B, S, kv_heads, hd] copied the
  whole cache every step). The sampler's float32 decode on one CPU device runs this
  attention in a C++ kernel instead (`cpu_kernels.decode_attention`, `decode_kernel=True`:
  it reads only the slots up to the query's), and its projections over
  `cpu_kernels.pack`ed weights (`fused_kernels` passed in).
"""

from __future__ import annotations

import functools
from typing import Optional

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mle_rl.models import cpu_kernels
from mle_rl.models.config import ModelConfig
from mle_rl.models.linear import dense

# A finite "minus infinity": rows whose keys are all masked (padding queries) stay NaN-free.
_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)

KVCache = tuple  # over layers of (k_t [B, kv_heads, head_dim, S], v [B, kv_heads, S, head_dim])
QUERY_BLOCK = 128  # uncached attention over T >= 2 blocks runs block by block (causal)
MAX_QUERY_BLOCKS = 4
UNROLL_DECODE_SCORES = True   # see Attention._attend


def _param(rngs: nnx.Rngs, shape, names, dtype, std=0.02, zeros=False, ones=False):
    if ones:
        value = jnp.ones(shape, dtype)
    elif zeros:
        value = jnp.zeros(shape, dtype)
    else:
        value = (std * jax.random.normal(rngs.params(), shape, jnp.float32)).astype(dtype)
    return nnx.Param(value, axes=names)


# Projections that read the same input (q/k/v; gate/up) run as one matmul over concatenated
# kernels when many tokens go through at once (training, prefill). A decode step (a few
# positions per row) would copy the kernels every step; the sampler concatenates them once
# per call instead and passes them in (`Qwen2.fused_kernels`).
FUSE_PROJECTIONS = True
FUSE_MIN_TOKENS = 256


def _fuse(x) -> bool:
    """Whether x [B, T, D] goes through fused projections (static: shapes only)."""
    return FUSE_PROJECTIONS and x.shape[1] >= 16 and x.shape[0] * x.shape[1] >= FUSE_MIN_TOKENS


class RMSNorm(nnx.Module):
    """y = w * x / sqrt(mean(x^2) + eps), computed in float32."""

    def __init__(self, dim: int, eps: float, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        self.eps = eps
        self.weight = _param(rngs, (dim,), ("norm",), param_dtype, ones=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = x.dtype
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (self.weight[...].astype(dtype) * x32.astype(dtype))


def _rotary_angles(positions, head_dim: int, theta: float, xp):
    """positions [...] -> angles [..., head_dim] in float32 (HF half-rotation), with `xp`
    = jax.numpy (traced positions) or numpy (a host table)."""
    inv_freq = (1.0 / (theta ** (xp.arange(0, head_dim, 2, dtype=xp.float32) / head_dim))
                ).astype(xp.float32)
    freqs = positions.astype(xp.float32)[..., None] * inv_freq  # [..., hd/2]
    return xp.concatenate([freqs, freqs], axis=-1)


def rotary_cos_sin(positions: jax.Array, head_dim: int, theta: float):
    """positions [B, T] int -> (cos, sin) each [B, T, head_dim] float32 (HF half-rotation)."""
    emb = _rotary_angles(positions, head_dim, theta, jnp)
    return jnp.cos(emb), jnp.sin(emb)


@functools.lru_cache(maxsize=16)
def rotary_table(length: int, head_dim: int, theta: float):
    """(cos, sin) [length, head_dim] float32 for positions 0..length-1, as `rotary_cos_sin`
    computes them, evaluated with numpy: constants in a jitted graph."""
    emb = _rotary_angles(np.arange(length), head_dim, theta, np)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def apply_rotary(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x [B, T, H, hd]; cos/sin [B, T, hd]."""
    half = x.shape[-1] // 2
    x32 = x.astype(jnp.float32)
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    out = x32 * cos[:, :, None, :] + rotated * sin[:, :, None, :]
    return out.astype(x.dtype)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        d, h, kv, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = h, kv, hd
        self.q_kernel = _param(rngs, (d, h * hd), ("embed", "heads"), param_dtype)
        self.q_bias = _param(rngs, (h * hd,), ("heads",), param_dtype, zeros=True)
        self.k_kernel = _param(rngs, (d, kv * hd), ("embed", "kv_heads"), param_dtype)
        self.k_bias = _param(rngs, (kv * hd,), ("kv_heads",), param_dtype, zeros=True)
        self.v_kernel = _param(rngs, (d, kv * hd), ("embed", "kv_heads"), param_dtype)
        self.v_bias = _param(rngs, (kv * hd,), ("kv_heads",), param_dtype, zeros=True)
        self.o_kernel = _param(rngs, (h * hd, d), ("heads", "embed"), param_dtype)

    def fused_kernels(self):
        """(q|k|v kernel [D, (H + 2 KV) hd], bias) concatenated, and the output kernel, for
        `__call__(fused=...)`."""
        return (jnp.concatenate([self.q_kernel[...], self.k_kernel[...], self.v_kernel[...]], 1),
                jnp.concatenate([self.q_bias[...], self.k_bias[...], self.v_bias[...]]),
                self.o_kernel[...])

    def __call__(self, x, cos, sin, key_valid, query_slot, cache=None, cache_index=None,
                 fused=None, decode_kernel=False):
        """x [B, T, D]; key_valid [B, S] bool; query_slot [T] int (slot of each query in the
        key sequence, for the causal mask). Without a cache S == T and the keys are this
        call's; with a cache (k_t [B, kv, hd, S], v [B, kv, S, hd]), this call's keys and
        values are written at `cache_index` first. `fused`: `fused_kernels()` computed once
        by the caller (the sampler's decode loop), used instead of three matmuls.
        `decode_kernel`: a one-token step over a float32 cache runs the attention in
        `cpu_kernels.decode_attention` (the caller checked it is available).
        Returns (y [B, T, D], new cache or None)."""
        b, t, _ = x.shape
        dtype = x.dtype
        o_kernel = self.o_kernel[...]
        if fused is not None or _fuse(x):
            # One [D, (H + 2 KV) hd] matmul instead of three, forward and backward.
            kernel, bias, o_kernel = fused if fused is not None else self.fused_kernels()
            qkv = dense(x, kernel.astype(dtype)) + bias.astype(dtype)
            q, k, v = jnp.split(qkv, [self.num_heads * self.head_dim,
                                      (self.num_heads + self.num_kv_heads) * self.head_dim], -1)
        else:
            q = (dense(x, self.q_kernel[...].astype(dtype)) + self.q_bias[...].astype(dtype))
            k = (dense(x, self.k_kernel[...].astype(dtype)) + self.k_bias[...].astype(dtype))
            v = (dense(x, self.v_kernel[...].astype(dtype)) + self.v_bias[...].astype(dtype))
        q = apply_rotary(q.reshape(b, t, self.num_heads, self.head_dim), cos, sin)
        k = apply_rotary(k.reshape(b, t, self.num_kv_heads, self.head_dim), cos, sin)
        v = v.reshape(b, t, self.num_kv_heads, self.head_dim)
        v = v.transpose(0, 2, 1, 3)  # [B, kv, T, hd]
        groups = self.num_heads // self.num_kv_heads
        qg = q.reshape(b, t, self.num_kv_heads, groups, self.head_dim).transpose(0, 2, 3, 1, 4)
        if cache is not None:
            k_cache, v_cache = cache
            k_t = jax.lax.dynamic_update_slice(
                k_cache, k.transpose(0, 2, 3, 1).astype(k_cache.dtype), (0, 0, 0, cache_index))
            v = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), (0, 0, cache_index, 0))
            out = self._attend(qg, k_t.astype(dtype), v.astype(dtype), key_valid, query_slot,
                               keys_transposed=True, decode_kernel=decode_kernel)
            new_cache = (k_t, v)
        else:
            new_cache = None
            k = k.transpose(0, 2, 1, 3)  # [B, kv, T, hd]
            if t >= 2 * QUERY_BLOCK:
                # Blockwise causal: query block [i, j) only needs keys [0, j), which skips
                # the upper triangle's work and keeps each block's scores small. At most
                # MAX_QUERY_BLOCKS blocks, so long sequences do not blow up the graph.
                n = min(MAX_QUERY_BLOCKS, t // QUERY_BLOCK)
                blk = -(-t // n)
                # Split (not sliced): the gradient of a split is one concatenation, where
                # overlapping slices gave one zero-padded full-size gradient per block, summed.
                bounds = list(range(blk, t, blk))
                q_blocks = jnp.split(qg, bounds, axis=3)
                k_blocks = jnp.split(k, bounds, axis=2)
                v_blocks = jnp.split(v, bounds, axis=2)
                outs = []
                for i, q_block in enumerate(q_blocks):
                    end = min((i + 1) * blk, t)
                    outs.append(self._attend(q_block, jnp.concatenate(k_blocks[:i + 1], axis=2),
                                             jnp.concatenate(v_blocks[:i + 1], axis=2),
                                             key_valid[:, :end], query_slot[i * blk:end]))
                out = jnp.concatenate(outs, axis=3)
            else:
                out = self._attend(qg, k, v, key_valid, query_slot)
        out = out.transpose(0, 3, 1, 2, 4).reshape(b, t, self.num_heads * self.head_dim)
        return dense(out, o_kernel.astype(dtype)), new_cache

    def _attend(self, qg, k, v, key_valid, query_slot, keys_transposed=False,
                decode_kernel=False):
        """qg [B, kv, G, T, hd]; k [B, kv, S, hd] (or [B, kv, hd, S] when keys_transposed);
        v [B, kv, S, hd]; key_valid [B, S]; query_slot [T]."""
        s = v.shape[2]
        # Scale the queries, not the [.., T, S] scores: T*hd multiplies instead of T*S.
        qg = qg * jnp.asarray(1.0 / np.sqrt(self.head_dim), qg.dtype)
        if (decode_kernel and keys_transposed and qg.shape[3] == 1
                and jax.default_backend() == "cpu"
                and all(x.dtype == jnp.float32 for x in (qg, k, v))):
            # The native kernel reads each row's keys and values once (1.2x faster decode
            # steps than the XLA path below for the tiny model at batch 16 on 2 cores).
            out = cpu_kernels.decode_attention(qg[:, :, :, 0], k, v, key_valid, query_slot[0],
                                               _MASK_VALUE)
            return out[:, :, :, None]
        if (keys_transposed and qg.shape[3] == 1 and UNROLL_DECODE_SCORES
                and jax.default_backend() == "cpu"):
            # Decode on CPU: q.K^T as head_dim multiply-adds over rows of K^T, one loop
            # fusion that XLA:CPU vectorises over S and splits across threads. Its batched
            # [G, hd] x [hd, S] dot runs one small GEMM per (row, kv head) on one thread;
            # this was 1.1-1.15x faster for a whole 512-token call (tiny model, batch 16).
            q32, k32 = qg[:, :, :, 0].astype(jnp.float32), k.astype(jnp.float32)
            acc = q32[..., 0, None] * k32[:, :, None, 0, :]
            for d in range(1, self.head_dim):
                acc = acc + q32[..., d, None] * k32[:, :, None, d, :]
            scores = acc[:, :, :, None, :]
        else:
            scores = jnp.einsum("bkgtd,bkds->bkgts" if keys_transposed else "bkgtd,bksd->bkgts",
                                qg, k, preferred_element_type=jnp.float32)
        causal = jnp.arange(s)[None, :] <= query_slot[:, None]               # [T, S]
        mask = causal[None, :, :] & key_valid[:, None, :]                    # [B, T, S]
        scores = jnp.where(mask[:, None, None, :, :], scores, _MASK_VALUE)
        probs = jax.nn.softmax(scores, axis=-1).astype(qg.dtype)
        return jnp.einsum("bkgts,bksd->bkgtd", probs, v)


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_kernel = _param(rngs, (d, f), ("embed", "mlp"), param_dtype)
        self.up_kernel = _param(rngs, (d, f), ("embed", "mlp"), param_dtype)
        self.down_kernel = _param(rngs, (f, d), ("mlp", "embed"), param_dtype)

    def fused_kernels(self):
        """(gate|up kernel [D, 2F] concatenated, down kernel), for `__call__(fused=...)`."""
        return (jnp.concatenate([self.gate_kernel[...], self.up_kernel[...]], 1),
                self.down_kernel[...])

    def __call__(self, x, fused=None):
        dtype = x.dtype
        down = self.down_kernel[...]
        if fused is not None or _fuse(x):
            kernel, down = fused if fused is not None else self.fused_kernels()
            g, u = jnp.split(dense(x, kernel.astype(dtype)), 2, -1)
        else:
            g = dense(x, self.gate_kernel[...].astype(dtype))
            u = dense(x, self.up_kernel[...].astype(dtype))
        return dense(jax.nn.silu(g) * u, down.astype(dtype))


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        self.input_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, rngs=rngs, param_dtype=param_dtype)
        self.attn = Attention(cfg, rngs=rngs, param_dtype=param_dtype)
        self.post_attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, rngs=rngs,
                                      param_dtype=param_dtype)
        self.mlp = MLP(cfg, rngs=rngs, param_dtype=param_dtype)

    def fused_kernels(self):
        return self.attn.fused_kernels(), self.mlp.fused_kernels()

    def __call__(self, x, cos, sin, key_valid, query_slot, cache=None, cache_index=None,
                 fused=None, decode_kernel=False):
        h, new_cache = self.attn(self.input_norm(x), cos, sin, key_valid, query_slot, cache,
                                 cache_index, fused=None if fused is None else fused[0],
                                 decode_kernel=decode_kernel)
        x = x + h
        x = x + self.mlp(self.post_attn_norm(x), fused=None if fused is None else fused[1])
        return x, new_cache


@functools.partial(nnx.remat, prevent_cse=True)
def _remat_layer(layer, x, cos, sin, key_valid, query_slot):
    """A decoder layer whose activations the backward pass recomputes (only its input is
    kept): `Qwen2.remat`."""
    return layer(x, cos, sin, key_valid, query_slot)


class Qwen2(nnx.Module):
    """Qwen2 causal LM. `dtype` is the compute dtype; parameters are kept in `param_dtype`.

    `remat` (a static attribute, default False; the learner sets it from
    `PPOConfig.remat`): the uncached forward keeps only each decoder layer's input for the
    backward pass and recomputes the rest (gradient checkpointing, MaxText's
    `remat_policy=full`): activation memory of one layer instead of all of them, for about
    a third more compute. Prefill and decode (with a cache) never differentiate and ignore it."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, dtype=jnp.float32,
                 param_dtype=jnp.float32, remat: bool = False):
        self.config = cfg
        self.dtype = dtype
        self.remat = remat
        self.embed = _param(rngs, (cfg.vocab_size, cfg.hidden_size), ("vocab", "embed"), param_dtype)
        self.layers = nnx.List([DecoderLayer(cfg, rngs=rngs, param_dtype=param_dtype)
                                for _ in range(cfg.num_layers)])
        self.final_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, rngs=rngs, param_dtype=param_dtype)
        if not cfg.tie_word_embeddings:
            self.lm_head = _param(rngs, (cfg.hidden_size, cfg.vocab_size), ("embed", "vocab"),
                                  param_dtype)

    # ------------------------------------------------------------------ pieces
    def fused_kernels(self):
        """Per layer ((q|k|v kernel, bias, o kernel), (gate|up kernel, down kernel)): q|k|v
        and gate|up concatenated along the output axis (a copy of those weights), for
        `hidden_states(fused_kernels=...)`. Matrices may be replaced by their
        `cpu_kernels.pack`ed form (the sampler's CPU decode loop). For inference: a caller
        that passes these in gets no gradient for the layer weights through them."""
        return tuple(layer.fused_kernels() for layer in self.layers)

    def lm_head_kernel(self) -> jax.Array:
        """[D, V] output projection (the embedding transposed when tied)."""
        if self.config.tie_word_embeddings:
            return self.embed[...].T
        return self.lm_head[...]

    def logits_from_hidden(self, h: jax.Array, kernel: Optional[jax.Array] = None) -> jax.Array:
        """h [..., D] -> float32 logits [..., V]; `kernel` [D, V] replaces
        `lm_head_kernel()` (the sampler passes a copy laid out for its decode loop)."""
        kernel = self.lm_head_kernel() if kernel is None else kernel
        if isinstance(kernel, cpu_kernels.Packed):
            return dense(h, kernel)
        return jnp.einsum("...d,dv->...v", h, kernel.astype(h.dtype),
                          preferred_element_type=jnp.float32)

    def hidden_states(self, tokens: jax.Array, attention_mask: Optional[jax.Array] = None,
                      positions: Optional[jax.Array] = None, cache: Optional[KVCache] = None,
                      cache_index=None, key_valid: Optional[jax.Array] = None,
                      fused_kernels=None, decode_kernel: bool = False):
        """Final-norm hidden states.

        tokens [B, T] int32. attention_mask [B, T] (1 = real token) masks padded keys in
        the uncached forward; positions default to `cumsum(mask) - 1` (left padding works).
        With a cache: `cache_index` (scalar) is the slot of tokens[:, 0]; `key_valid` [B, S]
        marks cache slots that hold real tokens (this call's slots included).
        `fused_kernels`: `self.fused_kernels()`, made once by a caller that runs many small
        steps (the sampler's decode loop): one q|k|v and one gate|up matmul per layer (its
        matrices may be `cpu_kernels.Packed`: then the native matmul runs them).
        `decode_kernel`: cached one-token steps in float32 use the native CPU attention
        (`cpu_kernels`); only for a caller on one CPU device that checked
        `cpu_kernels.available()`.
        Returns (h [B, T, D], new cache or None).
        """
        chex.assert_rank(tokens, 2)
        b, t = tokens.shape
        if attention_mask is None:
            attention_mask = jnp.ones((b, t), jnp.bool_)
        attention_mask = attention_mask.astype(jnp.bool_)
        if positions is None:
            positions = jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=1) - 1, 0)
        if cache is None:
            key_valid = attention_mask
            query_slot = jnp.arange(t)
        else:
            chex.assert_rank(key_valid, 2)
            query_slot = cache_index + jnp.arange(t)
        if cache is None:
            # Uncached: positions are < T, so cos/sin are rows of a [T, head_dim] table
            # computed on the host (a constant). Computed in the graph, XLA:CPU fused
            # cos/sin into every consumer and evaluated them once per head there, forward
            # and backward (66 cos + 66 sin [B, T, hd] evaluations per training step).
            cos, sin = rotary_table(t, self.config.head_dim, self.config.rope_theta)
            cos, sin = jnp.asarray(cos)[positions], jnp.asarray(sin)[positions]
        else:
            cos, sin = rotary_cos_sin(positions, self.config.head_dim, self.config.rope_theta)
        x = self.embed[...][tokens].astype(self.dtype)
        new_cache = []
        remat = self.remat and cache is None
        for i, layer in enumerate(self.layers):
            if remat:
                x, c = _remat_layer(layer, x, cos, sin, key_valid, query_slot)
                new_cache.append(c)
                continue
            x, c = layer(x, cos, sin, key_valid, query_slot,
                         None if cache is None else cache[i], cache_index,
                         fused=None if fused_kernels is None else fused_kernels[i],
                         decode_kernel=decode_kernel)
            new_cache.append(c)
        return self.final_norm(x), (None if cache is None else tuple(new_cache))

    def __call__(self, tokens: jax.Array, attention_mask: Optional[jax.Array] = None,
                 positions: Optional[jax.Array] = None) -> jax.Array:
        """int32 [B, T] -> float32 logits [B, T, V] (no cache)."""
        h, _ = self.hidden_states(tokens, attention_mask, positions)
        return self.logits_from_hidden(h)

    def init_cache(self, batch: int, length: int, dtype=None) -> KVCache:
        """Zeroed KV cache: per layer (k_t [B, kv_heads, head_dim, S], v [B, kv_heads, S,
        head_dim])."""
        cfg = self.config
        k_shape = (batch, cfg.num_kv_heads, cfg.head_dim, length)
        v_shape = (batch, cfg.num_kv_heads, length, cfg.head_dim)
        dtype = dtype or self.dtype
        return tuple((jnp.zeros(k_shape, dtype), jnp.zeros(v_shape, dtype))
                     for _ in range(cfg.num_layers))


def forward(model: Qwen2, tokens: jax.Array, attention_mask: Optional[jax.Array] = None,
            positions: Optional[jax.Array] = None) -> jax.Array:
    """`model(tokens, attention_mask, positions)` as one jitted call (one compilation per
    shape, reused). Called eagerly, `model(tokens)` dispatches (and compiles) op by op:
    for a 2-layer model and a few short sequences that took seconds, not milliseconds."""
    graphdef, state = nnx.split(model)
    return _forward(graphdef, state, tokens, attention_mask, positions)


@functools.partial(jax.jit, static_argnums=0)
def _forward(graphdef, state, tokens, attention_mask, positions):
    return nnx.merge(graphdef, state)(tokens, attention_mask, positions)


def init_model(cfg: ModelConfig, seed: int = 0, dtype=jnp.float32, param_dtype=jnp.float32) -> Qwen2:
    """A randomly initialised model (normal(0, 0.02) kernels, zero biases, unit norms)."""
    return Qwen2(cfg, rngs=nnx.Rngs(seed), dtype=dtype, param_dtype=param_dtype)
