"""Batched sampling with a KV cache: one jitted prefill, one jitted decode loop.

Prompts (ragged lists of token ids) are left-padded to a power-of-two bucket, the batch is
padded to a power of two (and a multiple of the mesh's data axis) and the generation length
is bucketed too, so repeated calls with similar shapes reuse the compiled functions. Weights
are arguments of the jitted functions (never closed over); the cache made by prefill is
donated to the decode loop, a `lax.while_loop` that stops early when every row has produced
an EOS id. Decoding runs in one or more phases whose cache grows (`DECODE_WINDOWS`), so a
step attends over about the filled part of the cache; each phase is one compilation.

Tokens are drawn by `models/draw.py` (one uniform per row, inverse CDF; top-p; greedy).
On CPU a tied LM head is laid out as [D, V] once per decode call.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from mle_rl.models import cpu_kernels, decode_path
from mle_rl.models.draw import sample_token
from mle_rl.models import sharding as shd

MIN_PROMPT_BUCKET = 16
MIN_GEN_BUCKET = 16
FUSE_DECODE = True    # decode steps use concatenated q|k|v and gate|up kernels
# Single-device float32 decoding on CPU: in the native kernels (`models/cpu_kernels.py`) or
# XLA. None: MLE_RL_CPU_KERNELS decides (auto: the faster one, measured once per machine,
# `models/decode_path.py`); True: the kernels when they build; False: XLA.
CPU_DECODE_KERNEL = None
FIRST_WINDOW = 64     # generation slots of the first of several decode phases

# Number of times each jitted function was traced (== compiled) in this process.
TRACE_COUNTS = {"prefill": 0, "decode": 0}


@dataclasses.dataclass(frozen=True)
class SampleOutput:
    """tokens [B, N] int32 (pad after the end), logprobs [B, N] float32 (log-softmax of the
    temperature-1 logits at the sampled token, before top-p; 0 after the end), mask [B, N]
    bool (generated tokens, EOS included), lengths [B] int32."""

    tokens: np.ndarray
    logprobs: np.ndarray
    mask: np.ndarray
    lengths: np.ndarray


def bucket(n: int, minimum: int) -> int:
    """Smallest power of two >= max(n, minimum)."""
    n = max(int(n), minimum, 1)
    return 1 << (n - 1).bit_length()


def _cache_sharding(mesh, num_kv_heads: int):
    if mesh is None:
        return None
    model_axis = shd.MODEL if num_kv_heads % mesh.shape[shd.MODEL] == 0 else None
    return NamedSharding(mesh, P(shd.DATA, model_axis, None, None))


def _constrain_cache(cache, sharding):
    if sharding is None:
        return cache
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), cache)


@functools.partial(jax.jit, static_argnames=("graphdef", "gen_len", "cache_sharding"))
def _prefill(graphdef, state, tokens, mask, *, gen_len, cache_sharding):
    """tokens/mask [B, P] (left-padded) -> (last logits [B, V] f32, cache, key_valid [B, S]):
    a cache of P + gen_len slots. The prompt attends over its own P slots only; the
    generation slots are appended after."""
    TRACE_COUNTS["prefill"] += 1
    model = nnx.merge(graphdef, state)
    b, p = tokens.shape
    cache = _constrain_cache(model.init_cache(b, p), cache_sharding)
    positions = jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=1) - 1, 0)
    valid = mask.astype(bool)
    h, cache = model.hidden_states(tokens, positions=positions, cache=cache, cache_index=0,
                                   key_valid=valid)
    logits = model.logits_from_hidden(h[:, -1])
    return (logits, *_grow(cache, valid, extra=gen_len, cache_sharding=cache_sharding))


# XLA:CPU compiler options of the decode loop: YNNPACK fusions for reductions only. Its
# matmuls have a few rows (the batch): YNNPACK's dot fusions (XLA's default for CPU dots)
# ran them 1.2-1.5x slower than XLA's own dot emitter on the tiny model at batch 16, and
# its elementwise fusions doubled the step; its reductions (softmax, logsumexp, the
# sampler's sums) made whole 512-token calls 6-8% faster (interleaved A/B, same process).
# Training and prefill keep the default, where YNNPACK is faster.
CPU_DECODE_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE"}
# Tried in order when this jaxlib rejects the options above (they are experimental flags).
CPU_DECODE_FALLBACK_OPTIONS = ({"xla_cpu_experimental_ynn_fusion_type": ""},)
_DECODE_JITS = {}


def _decode(*args, **kwargs):
    return _decode_jit()(*args, **kwargs)


def _decode_jit():
    """`_decode_loop` jitted for the backend (CPU: CPU_DECODE_COMPILER_OPTIONS), donating."""
    backend = jax.default_backend()
    fn = _DECODE_JITS.get(backend)
    if fn is None:
        fn = _DECODE_JITS[backend] = jax.jit(
            _decode_loop, static_argnames=("graphdef", "prompt_bucket", "greedy", "use_top_p",
                                           "cache_sharding"),
            donate_argnames=("cache", "out_tok", "out_lp", "out_mask"),
            compiler_options=_cpu_decode_options() if backend == "cpu" else None)
    return fn


def _cpu_decode_options():
    """CPU_DECODE_COMPILER_OPTIONS, else the first of CPU_DECODE_FALLBACK_OPTIONS that this
    jaxlib accepts (they are experimental XLA flags), else None: an unknown option must
    not break sampling."""
    for options in (CPU_DECODE_COMPILER_OPTIONS, *CPU_DECODE_FALLBACK_OPTIONS):
        try:
            jax.jit(lambda x: x + 1, compiler_options=options).lower(jnp.float32(0)).compile()
        except Exception:  # noqa: BLE001 - any rejection means "not supported here"
            continue
        return options
    return None


def _decode_loop(graphdef, state, logits, cache, key_valid, prompt_lens, done, start, stop, rng,
            temperature, top_p, eos_ids, pad_id, out_tok, out_lp, out_mask, *, prompt_bucket,
            greedy, use_top_p, cache_sharding, packed=None):
    """Decode steps i in [start, stop) (stopping early once every row is done) with a cache
    of `key_valid.shape[1]` slots. The cache and the outputs are donated and returned, so
    they are updated in place instead of copied into the loop. `packed`: the output of
    `_packed_weights` (made once per `generate` call): the steps then run in the native
    CPU kernels."""
    TRACE_COUNTS["decode"] += 1
    model = nnx.merge(graphdef, state)
    decode_kernel = packed is not None
    if decode_kernel:
        fused, head = packed
    else:
        fused, head = _decode_weights(model)

    def cond(carry):
        return (carry[0] < stop) & ~jnp.all(carry[4])

    def body(carry):
        i, logits, cache, key_valid, done, out_tok, out_lp, out_mask = carry
        u = jax.lax.dynamic_index_in_dim(uniforms, i, keepdims=False)
        tok, lp = sample_token(logits, u, temperature, top_p, greedy=greedy, use_top_p=use_top_p)
        live = ~done
        tok = jnp.where(live, tok, pad_id)
        out_tok = out_tok.at[:, i].set(tok)
        out_lp = out_lp.at[:, i].set(jnp.where(live, lp, 0.0))
        out_mask = out_mask.at[:, i].set(live)
        done = done | (live & jnp.any(tok[:, None] == eos_ids[None, :], axis=-1))
        slot = prompt_bucket + i
        key_valid = jax.lax.dynamic_update_slice(key_valid, live[:, None], (0, slot))
        h, cache = model.hidden_states(tok[:, None], positions=(prompt_lens + i)[:, None],
                                       cache=cache, cache_index=slot, key_valid=key_valid,
                                       fused_kernels=fused, decode_kernel=decode_kernel)
        cache = _constrain_cache(cache, cache_sharding)
        logits = model.logits_from_hidden(h[:, 0], kernel=head)
        return i + 1, logits, cache, key_valid, done, out_tok, out_lp, out_mask

    # One uniform per (step, row), drawn before the loop: a draw inside the loop body is two
    # small threefry while-loops per step on CPU (~100 extra thunks per token).
    rng, key = jax.random.split(rng)
    uniforms = jax.random.uniform(key, (out_tok.shape[1], out_tok.shape[0]), jnp.float32)
    carry = (start, logits, cache, key_valid, done, out_tok, out_lp, out_mask)
    _, logits, cache, key_valid, done, out_tok, out_lp, out_mask = jax.lax.while_loop(
        cond, body, carry)
    return logits, cache, key_valid, done, rng, out_tok, out_lp, out_mask


def _decode_weights(model):
    """(fused kernels or None, LM head [D, V]) as the decode loop reads them."""
    head = model.lm_head_kernel()
    if model.config.tie_word_embeddings and jax.default_backend() == "cpu":
        # Tied: the head is the embedding transposed, and XLA:CPU's [B, D] x [V, D]^T
        # product is slower than [B, D] x [D, V] (2.8 vs 2.0 ms per step for the tiny
        # model at batch 16). Lay the head out once per call; the barrier keeps XLA from
        # folding the transpose back into every step's product.
        head = jax.lax.optimization_barrier(head)
    # One q|k|v and one gate|up matmul per layer and step instead of five: the kernels are
    # concatenated once per call (a copy of those weights); the barrier keeps XLA from
    # moving the concatenation into the loop.
    fused = jax.lax.optimization_barrier(model.fused_kernels()) if FUSE_DECODE else None
    return fused, head


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _packed_weights(graphdef, state):
    """The decode weights packed for the native few-row matmul (`cpu_kernels.pack`: panels
    of 16 columns), once per `generate` call (one copy) and passed to every decode phase."""
    model = nnx.merge(graphdef, state)
    fused = model.fused_kernels()
    head = model.lm_head_kernel()
    return jax.tree.map(cpu_kernels.pack, fused), cpu_kernels.pack(head)


# Decode phases (one compilation each): "one": the whole generation bucket; "fine": 64,
# 128, 192, 256, 384, 512, 768, ... slots (a step attends over ~1.2x the filled slots);
# "double": 64, 128, 256, ...; "two": the first window, then the whole bucket. "auto": "one"
# where the native kernels decode (their attention stops at the query's slot: a step costs
# the filled part of any cache), else "fine" (XLA attends over the whole cache: "one"
# compiles 6x faster but decodes 13-18% slower, and a call whose rows stop early still
# attends over the whole bucket; "fine" compiles a phase only when a call reaches it).
# Figures: benchmarks/README.md.
DECODE_WINDOWS = "auto"
PHASE_MODES = ("auto", "one", "fine", "double", "two")


def _phase_mode(kernels: bool) -> str:
    """DECODE_WINDOWS with "auto" resolved for the decode path (kernels or XLA)."""
    if DECODE_WINDOWS not in PHASE_MODES:
        raise ValueError(f"sampling.DECODE_WINDOWS must be one of {PHASE_MODES}, "
                         f"got {DECODE_WINDOWS!r}")
    return DECODE_WINDOWS if DECODE_WINDOWS != "auto" else ("one" if kernels else "fine")


def _next_window(w: int, g: int, mode: str) -> int:
    """Generation slots of the phase after one of `w` slots (0: the first phase; bucket
    `g`: the most) in phase mode `mode`."""
    if w == 0:
        return g if mode == "one" else min(FIRST_WINDOW, g)
    if mode in ("one", "two"):
        return g
    if mode == "double" or w < 128:
        return min(2 * w, g)
    return min(w * 3 // 2 if w & (w - 1) == 0 else w * 4 // 3, g)


def cpu_decode_path(announce: bool = True) -> decode_path.Choice:
    """Which path decodes float32 sampling on one CPU device in this process (`.kernels`,
    `.line`): CPU_DECODE_KERNEL, else MLE_RL_CPU_KERNELS (auto: measured once per machine)."""
    return decode_path.choose(generate, CPU_DECODE_KERNEL, announce)


def _use_decode_kernel(model, state, mesh, force=None) -> bool:
    """The native kernels may serve float32 decoding on one CPU device (no mesh or a mesh
    of one device, as the trainer's on one CPU; no sharded parameters): when `force` (else
    `cpu_decode_path()`) says so and they build."""
    if force is False or (mesh is not None and mesh.size > 1) or model.dtype != jnp.float32:
        return False
    devices = set()
    for leaf in jax.tree.leaves(state):
        devices |= getattr(getattr(leaf, "sharding", None), "device_set", set())
        if len(devices) > 1:
            return False
    if [d.platform for d in devices] != ["cpu"]:
        return False
    kernels = cpu_decode_path().kernels if force is None else force
    return kernels and cpu_kernels.available()


@functools.partial(jax.jit, static_argnames=("extra", "cache_sharding"))
def _grow(cache, key_valid, *, extra, cache_sharding):
    """Append `extra` empty slots to every layer's cache and to `key_valid`."""
    # Per layer (k_t [B, kv, hd, S], v [B, kv, S, hd]): keys grow along their last axis.
    cache = tuple((jnp.pad(k, ((0, 0), (0, 0), (0, 0), (0, extra))),
                   jnp.pad(v, ((0, 0), (0, 0), (0, extra), (0, 0)))) for k, v in cache)
    return _constrain_cache(cache, cache_sharding), jnp.pad(key_valid, ((0, 0), (0, extra)))


def generate(model, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, rng,
             temperature: float = 1.0, top_p: float = 1.0, eos_ids: Sequence[int] = (),
             pad_id: int = 0, mesh: Optional[jax.sharding.Mesh] = None,
             decode_kernel: Optional[bool] = None) -> SampleOutput:
    """Sample continuations of ragged `prompts` (lists of token ids) from `model`.

    rng: a `jax.random` key or an int seed. temperature=0 is greedy. With `mesh`, the batch
    is sharded over its data axis (parameters stay wherever the model's are: shard them with
    `models.sharding.shard_model` on the learner's mesh). decode_kernel: True/False forces
    the native CPU kernels / XLA for float32 on one CPU device; None: `cpu_decode_path()`.
    """
    if not prompts:
        raise ValueError("generate: no prompts given.")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("generate: every prompt needs at least one token.")
    if max_new_tokens < 1:
        raise ValueError(f"generate: max_new_tokens must be >= 1, got {max_new_tokens}.")
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"generate: need temperature >= 0 and 0 < top_p <= 1, "
                         f"got {temperature}, {top_p}.")
    if isinstance(rng, int):
        rng = jax.random.key(rng)
    n = len(prompts)
    multiple = mesh.shape[shd.DATA] if mesh is not None else 1
    b = bucket(n, 1)
    b = -(-b // multiple) * multiple
    p = bucket(max(len(x) for x in prompts), MIN_PROMPT_BUCKET)
    g = bucket(max_new_tokens, MIN_GEN_BUCKET)
    tokens = np.full((b, p), pad_id, np.int32)
    mask = np.zeros((b, p), np.int32)
    for i, prompt in enumerate(prompts):
        tokens[i, p - len(prompt):] = np.asarray(prompt, np.int32)
        mask[i, p - len(prompt):] = 1
    mask[n:, -1] = 1                       # filler rows: one dummy token, done from the start
    prompt_lens = mask.sum(1).astype(np.int32)
    done = np.arange(b) >= n

    cfg = model.config
    graphdef, state = nnx.split(model)
    cache_sh = _cache_sharding(mesh, cfg.num_kv_heads)
    put = (lambda x: jax.device_put(x, shd.batch_sharding(mesh, x.ndim))) if mesh else jnp.asarray
    tokens, mask, prompt_lens, done = map(put, (tokens, mask, prompt_lens, done))
    # Decode in phases whose cache grows (DECODE_WINDOWS), from the prefill's first window.
    kernels = _use_decode_kernel(model, state, mesh, decode_kernel)
    mode = _phase_mode(kernels)
    window = _next_window(0, g, mode)
    logits, cache, key_valid = _prefill(graphdef, state, tokens, mask, gen_len=window,
                                        cache_sharding=cache_sh)
    greedy = temperature == 0
    packed = _packed_weights(graphdef, state) if kernels else None
    eos = jnp.asarray(list(eos_ids) or [-1], jnp.int32)
    out_tok, out_lp, out_mask = map(put, (np.full((b, g), pad_id, np.int32),
                                          np.zeros((b, g), np.float32), np.zeros((b, g), bool)))
    start = 0
    while True:
        stop = min(window, max_new_tokens)
        logits, cache, key_valid, done, rng, out_tok, out_lp, out_mask = _decode(
            graphdef, state, logits, cache, key_valid, prompt_lens, done, jnp.int32(start),
            jnp.int32(stop), rng, jnp.float32(max(temperature, 1e-6)), jnp.float32(top_p), eos,
            jnp.int32(pad_id), out_tok, out_lp, out_mask, prompt_bucket=p, greedy=greedy,
            use_top_p=(not greedy and top_p < 1.0), cache_sharding=cache_sh, packed=packed)
        if stop >= max_new_tokens or bool(jax.device_get(jnp.all(done))):
            break
        start, new_window = stop, _next_window(window, g, mode)
        cache, key_valid = _grow(cache, key_valid, extra=new_window - window,
                                 cache_sharding=cache_sh)
        window = new_window
    del cache
    out_tok, out_lp, out_mask = (np.asarray(x)[:n, :max_new_tokens]
                                 for x in jax.device_get((out_tok, out_lp, out_mask)))
    return SampleOutput(tokens=out_tok, logprobs=out_lp, mask=out_mask,
                        lengths=out_mask.sum(1).astype(np.int32))


def phase_windows(max_new_tokens: int, kernels: bool = False) -> list:
    """Generation slots of each decode phase `generate` runs for `max_new_tokens` (with
    the native kernels decoding or not)."""
    g, mode = bucket(max_new_tokens, MIN_GEN_BUCKET), _phase_mode(kernels)
    windows = [_next_window(0, g, mode)]
    while windows[-1] < max_new_tokens:
        windows.append(_next_window(windows[-1], g, mode))
    return windows


def lower(model, *, batch: int, prompt_len: int, max_new_tokens: int, mesh=None,
          top_p: float = 1.0) -> dict:
    """`generate`'s jitted functions (XLA path) compiled ahead of time for `batch` prompts
    of up to `prompt_len` tokens and `max_new_tokens`, with `generate`'s shapes and
    shardings (`model` may be abstract: `nnx.eval_shape`, parameters carrying their
    shardings) -> {"prefill", "grow" (into the last phase; absent with one phase), "decode"
    (the last phase)}: `jax.stages.Compiled`, each taking the last one's output shardings."""
    cfg = model.config
    graphdef, state = nnx.split(model)
    b = bucket(batch, 1)
    if mesh is not None:
        b = -(-b // mesh.shape[shd.DATA]) * mesh.shape[shd.DATA]
    p = bucket(prompt_len, MIN_PROMPT_BUCKET)
    g = bucket(max_new_tokens, MIN_GEN_BUCKET)
    windows = phase_windows(max_new_tokens)
    cache_sh = _cache_sharding(mesh, cfg.num_kv_heads)

    def arg(shape, dtype, sharding="batch"):
        if sharding == "batch":
            sharding = shd.batch_sharding(mesh, len(shape)) if mesh is not None else None
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    out = {"prefill": _prefill.lower(graphdef, state, arg((b, p), jnp.int32),
                                     arg((b, p), jnp.int32), gen_len=windows[0],
                                     cache_sharding=cache_sh).compile()}
    logits_sh, cache_out_sh, key_valid_sh = out["prefill"].output_shardings

    def cache(slots, shardings):
        k = (b, cfg.num_kv_heads, cfg.head_dim, slots)
        v = (b, cfg.num_kv_heads, slots, cfg.head_dim)
        return tuple((arg(k, model.dtype, ks), arg(v, model.dtype, vs)) for ks, vs in shardings)

    kv = cache(p + windows[0], cache_out_sh)
    key_valid = arg((b, p + windows[0]), jnp.bool_, key_valid_sh)
    if len(windows) > 1:
        grow_cache = cache(p + windows[-2], cache_out_sh)
        out["grow"] = _grow.lower(grow_cache, arg((b, p + windows[-2]), jnp.bool_, key_valid_sh),
                                  extra=windows[-1] - windows[-2],
                                  cache_sharding=cache_sh).compile()
        cache_out_sh, key_valid_sh = out["grow"].output_shardings
        kv = cache(p + windows[-1], cache_out_sh)
        key_valid = arg((b, p + windows[-1]), jnp.bool_, key_valid_sh)
    scalar = lambda dtype: jax.ShapeDtypeStruct((), dtype)  # noqa: E731
    rng = jax.eval_shape(lambda: jax.random.key(0))
    out["decode"] = _decode_jit().lower(
        graphdef, state, arg((b, cfg.vocab_size), jnp.float32, logits_sh), kv, key_valid,
        arg((b,), jnp.int32), arg((b,), jnp.bool_), scalar(jnp.int32), scalar(jnp.int32), rng,
        scalar(jnp.float32), scalar(jnp.float32), jax.ShapeDtypeStruct((1,), jnp.int32),
        scalar(jnp.int32), arg((b, g), jnp.int32), arg((b, g), jnp.float32),
        arg((b, g), jnp.bool_), prompt_bucket=p, greedy=False, use_top_p=top_p < 1.0,
        cache_sharding=cache_sh).compile()
    return out
