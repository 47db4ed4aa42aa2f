"""The on-disk form of a checkpoint's contents, without orbax: how a train state becomes a
flat dict of arrays with dotted keys, how host state (`extra`) becomes JSON plus numpy arrays,
and the checksums that catch silently damaged files.

Train state: `flatten_state` maps every leaf to its key path joined by "." (dict keys, int
keys of `nnx.to_pure_dict` included, NamedTuple fields, tuple indices):
`policy.layers.0.attn.q_kernel`, `actor_opt.1.0.mu.embed`, `step`. Restoring unflattens with
the tree structure of the *current* state, so int keys and optax NamedTuples come back as
they are.

Host state: JSON types pass through; each numpy array (or numpy scalar) is replaced by
`{"__ndarray__": key or None, "dtype": "<f4", "shape": [...], "scalar": bool, "crc32": int}`
and stored separately under `key` (zero-size arrays, which orbax cannot write, only as the
reference).

Config compatibility: `compatible` compares the config saved in `extra` with the current
one (re-exported by `checkpoint`, whose `check_compatible` raises on a mismatch).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import zlib
from typing import Any, Iterable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

ARRAY_TAG = "__ndarray__"

# Train state <-> flat dict with dotted string keys.


def _key_name(entry) -> str:
    if isinstance(entry, jax.tree_util.DictKey):
        name = entry.key
    elif isinstance(entry, jax.tree_util.GetAttrKey):
        name = entry.name
    elif isinstance(entry, jax.tree_util.SequenceKey):
        name = entry.idx
    elif isinstance(entry, jax.tree_util.FlattenedIndexKey):
        name = entry.key
    else:
        name = str(entry)
    name = str(name)
    if not name or "." in name or "/" in name:
        raise ValueError(f"train-state key {name!r} cannot be checkpointed: keys must be "
                         "non-empty and contain no '.' or '/'.")
    return name


def flatten_state(tree) -> tuple[dict, Any]:
    """`tree` -> ({"a.0.b": leaf, ...} in tree order, treedef)."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    flat = {}
    for path, leaf in leaves:
        key = ".".join(_key_name(e) for e in path) or "root"
        if key in flat:
            raise ValueError(f"two train-state leaves share the checkpoint key {key!r} "
                             "(e.g. dict keys 0 and '0'); rename one.")
        flat[key] = leaf
    return flat, treedef


def abstract_leaf(x) -> jax.ShapeDtypeStruct:
    """A ShapeDtypeStruct with a sharding (the default device when `x` has none)."""
    sharding = getattr(x, "sharding", None)
    if sharding is None:
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.ShapeDtypeStruct(tuple(x.shape), x.dtype, sharding=sharding)


def dtype_name(dtype) -> str:
    return np.dtype(dtype).name


def _leaf_checksum(x) -> jax.Array:
    """uint32 Σ_i word_i · (2i + 1) · 0x9E3779B1 (mod 2^32) over the array's raw words.

    Any single changed word changes the sum (the multiplier is odd); sharding-independent,
    since integer addition mod 2^32 is associative.
    """
    width = np.dtype(x.dtype).itemsize
    if x.dtype == jnp.bool_:
        u = x.astype(jnp.uint32)
    elif width in (4, 8):
        u = jax.lax.bitcast_convert_type(x, jnp.uint32)      # 8 bytes -> [..., 2] words
    else:
        u = jax.lax.bitcast_convert_type(x, {1: jnp.uint8, 2: jnp.uint16}[width])
        u = u.astype(jnp.uint32)
    # Flat (row-major) index of every element, built per axis so no reshape moves shards.
    idx = jnp.zeros(u.shape, jnp.uint32)
    stride = 1
    for d in reversed(range(u.ndim)):
        idx = idx + jax.lax.broadcasted_iota(jnp.uint32, u.shape, d) * jnp.uint32(stride)
        stride = (stride * u.shape[d]) % (1 << 32)
    mult = (idx * jnp.uint32(2) + jnp.uint32(1)) * jnp.uint32(0x9E3779B1)
    return jnp.sum(u * mult, dtype=jnp.uint32)


leaf_checksum = jax.jit(_leaf_checksum)


def state_checksums(flat: dict) -> dict:
    """{key: int} for the train-state leaves, computed where the arrays live, one leaf at a
    time: XLA:CPU materialises each leaf's words and multipliers before summing them, so one
    call over the whole state held temporaries as large as the state (7.4 GiB beside a
    7.4 GiB float32 0.5B state, in every checkpoint); a leaf at a time holds the largest
    leaf's. Each result is fetched before the next call starts, so no two overlap."""
    return {k: int(jax.device_get(leaf_checksum(v))) for k, v in flat.items()}


def json_checksum(obj) -> int:
    return zlib.crc32(json.dumps(obj, sort_keys=True, allow_nan=True).encode())


# ---------------------------------------------------------------------------------------
# Host state (`extra`) <-> JSON + numpy arrays.


def encode_extra(obj, where: str, arrays: dict):
    """JSON-able copy of `obj` with numpy arrays moved into `arrays` (key -> copy)."""
    if isinstance(obj, jax.Array):
        obj = np.asarray(obj)
    if isinstance(obj, (np.ndarray, np.generic)):
        a = np.asarray(obj)
        if a.dtype.kind not in "biufc":
            raise ValueError(f"extra{where} is a numpy array of dtype {a.dtype}, which a "
                             "checkpoint cannot hold; store text as JSON strings instead.")
        ref = {ARRAY_TAG: None, "dtype": a.dtype.str, "shape": list(a.shape),
               "scalar": isinstance(obj, np.generic)}
        if a.size:
            key = f"a{len(arrays)}"
            arrays[key] = np.array(a, copy=True)    # the caller may reuse its array
            ref[ARRAY_TAG] = key
            ref["crc32"] = zlib.crc32(np.ascontiguousarray(a).tobytes())
        return ref
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise ValueError(f"extra{where} has the key {k!r} of type {type(k).__name__}; "
                                 "use string keys (JSON would turn it into a string).")
            if k == ARRAY_TAG:
                raise ValueError(f"extra{where} uses the reserved key {ARRAY_TAG!r}.")
            out[k] = encode_extra(v, f"{where}[{k!r}]", arrays)
        return out
    if isinstance(obj, (list, tuple)):
        return [encode_extra(v, f"{where}[{i}]", arrays) for i, v in enumerate(obj)]
    raise ValueError(f"extra{where} is a {type(obj).__name__}, which a checkpoint cannot hold; "
                     "use JSON types (dict/list/str/int/float/bool/None) or numpy arrays.")


def array_refs(obj, out: list) -> list:
    if isinstance(obj, dict):
        if ARRAY_TAG in obj:
            out.append(obj)
        else:
            for v in obj.values():
                array_refs(v, out)
    elif isinstance(obj, list):
        for v in obj:
            array_refs(v, out)
    return out


def decode_extra(obj, arrays: dict):
    if isinstance(obj, dict):
        if ARRAY_TAG in obj:
            dtype, shape = np.dtype(obj["dtype"]), tuple(obj["shape"])
            key = obj[ARRAY_TAG]
            a = np.zeros(shape, dtype) if key is None else np.asarray(arrays[key])
            if a.shape != shape or a.dtype != dtype:
                raise ValueError(f"host array {key} came back as {a.dtype}{list(a.shape)}, "
                                 f"saved as {dtype}{list(shape)}")
            if key is not None and zlib.crc32(np.ascontiguousarray(a).tobytes()) != obj["crc32"]:
                raise ValueError(f"host array {key} {dtype}{list(shape)} fails its checksum")
            return a[()] if obj.get("scalar") else a
        return {k: decode_extra(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_extra(v, arrays) for v in obj]
    return obj


# ---------------------------------------------------------------------------------------

def first_difference(saved: list, flat_abs: dict) -> Optional[str]:
    """Describes the first path whose presence, shape or dtype differs; None if all match."""
    saved_map = {row[0]: (tuple(row[1]), row[2]) for row in saved}
    for k, a in flat_abs.items():
        now = (tuple(a.shape), dtype_name(a.dtype))
        if k not in saved_map:
            return f"{k} {_fmt(now)} is not in the checkpoint"
        if saved_map[k] != now:
            return f"{k} is {_fmt(saved_map[k])} in the checkpoint but {_fmt(now)} now"
    extra = [k for k in saved_map if k not in flat_abs]
    if extra:
        return f"the checkpoint has {extra[0]} {_fmt(saved_map[extra[0]])}, absent now"
    return None


def _fmt(shape_dtype) -> str:
    shape, dtype = shape_dtype
    return f"{dtype}{list(shape)}"


# ---------------------------------------------------------------------------------------
# Config compatibility on resume (the saved config is in `extra`; `checkpoint.check_compatible`
# raises on a mismatch).

# Config names (fnmatch globs on the last dotted component) that may differ between a run and
# its resumption: run length, logging and bookkeeping, not the model, optimizer or tasks.
MAY_CHANGE = ("max_steps", "num_updates", "log_*", "*_log", "logdir", "logging", "*_every",
              "every_*", "workdir", "resume", "resume_*", "progress*", "tensorboard*",
              "verbose", "verbosity", "num_actors", "eval_*", "*_timeout_s",
              "max_skipped_updates")


@dataclasses.dataclass(frozen=True)
class ConfigDiff:
    """Config paths that differ: `incompatible` ones block a resume, `allowed` ones do not."""

    incompatible: tuple
    allowed: tuple

    @property
    def ok(self) -> bool:
        return not self.incompatible

    def describe(self, limit: int = 5) -> str:
        parts = [f"{p}: {a!r} -> {b!r}" for p, a, b in self.incompatible[:limit]]
        more = len(self.incompatible) - limit
        return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _flatten_config(cfg, prefix: str = "", out: Optional[dict] = None) -> dict:
    out = {} if out is None else out
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        cfg = dataclasses.asdict(cfg)
    if isinstance(cfg, dict):
        for k, v in cfg.items():
            _flatten_config(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = _normalize(cfg)
    return out


def _normalize(v):
    if isinstance(v, (list, tuple)):
        return [_normalize(x) for x in v]
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, dict):
        return {str(k): _normalize(x) for k, x in v.items()}
    return v


def compatible(config_saved: dict, config_now: dict, keys: Optional[Sequence[str]] = None, *,
               may_change: Iterable[str] = MAY_CHANGE) -> ConfigDiff:
    """Compares two (nested) config dicts by dotted path.

    keys: globs of the full paths that must match (e.g. ("model.*", "tasks")); when None,
      every path must match except those whose last component matches a `may_change` glob
      (max_steps, log_every, workdir, ...).
    Lists and tuples compare equal; a path present on one side only counts as a difference.
    Returns a ConfigDiff; `diff.ok` is True when the run may resume.
    """
    a, b = _flatten_config(config_saved), _flatten_config(config_now)
    missing = object()
    bad, fine = [], []
    for path in sorted(set(a) | set(b)):
        va, vb = a.get(path, missing), b.get(path, missing)
        if va == vb:
            continue
        va = "<absent>" if va is missing else va
        vb = "<absent>" if vb is missing else vb
        if keys is not None:
            matters = any(fnmatch.fnmatchcase(path, g) for g in keys)
        else:
            name = path.rsplit(".", 1)[-1]
            matters = not any(fnmatch.fnmatchcase(name, g) for g in may_change)
        (bad if matters else fine).append((path, va, vb))
    return ConfigDiff(tuple(bad), tuple(fine))
