"""Hugging Face checkpoints in and out: `config.json` + `*.safetensors` (one file or shards).

`load` builds the model abstractly (no random init) and fills it one tensor at a time from
the safetensors files, so the whole model is never held twice. `save` writes a directory
that `transformers.AutoModelForCausalLM.from_pretrained` loads.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pathlib
import shutil
from typing import Iterator, Optional

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import nnx
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from mle_rl.models import sharding as shd
from mle_rl.models.config import ConfigError, ModelConfig
from mle_rl.models.qwen2 import Qwen2

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


class CheckpointError(ValueError):
    """A checkpoint this library cannot load; the message names the file or tensor."""


def param_table(cfg: ModelConfig) -> Iterator[tuple[str, tuple, bool]]:
    """(HF tensor name, NNX state path, transpose?) for every parameter."""
    yield "model.embed_tokens.weight", ("embed",), False
    for i in range(cfg.num_layers):
        p, m = f"model.layers.{i}.", ("layers", i)
        yield p + "input_layernorm.weight", m + ("input_norm", "weight"), False
        yield p + "post_attention_layernorm.weight", m + ("post_attn_norm", "weight"), False
        for x in "qkv":
            yield p + f"self_attn.{x}_proj.weight", m + ("attn", f"{x}_kernel"), True
            yield p + f"self_attn.{x}_proj.bias", m + ("attn", f"{x}_bias"), False
        yield p + "self_attn.o_proj.weight", m + ("attn", "o_kernel"), True
        for x in ("gate", "up", "down"):
            yield p + f"mlp.{x}_proj.weight", m + ("mlp", f"{x}_kernel"), True
    yield "model.norm.weight", ("final_norm", "weight"), False
    if not cfg.tie_word_embeddings:
        yield "lm_head.weight", ("lm_head",), True


def read_config(path: str | os.PathLike) -> ModelConfig:
    f = pathlib.Path(path) / "config.json"
    if not f.is_file():
        raise CheckpointError(f"{f}: missing; a checkpoint directory needs config.json.")
    try:
        d = json.loads(f.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{f}: not valid JSON ({e}).") from None
    try:
        return ModelConfig.from_hf_dict(d, source=str(f))
    except ConfigError as e:
        raise CheckpointError(str(e)) from None


def _weight_map(path: pathlib.Path) -> dict[str, pathlib.Path]:
    """HF tensor name -> the shard file that holds it."""
    index = path / INDEX_FILE
    if index.is_file():
        try:
            wm = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise CheckpointError(f"{index}: not a safetensors index ({e}).") from None
        files = {name: path / fname for name, fname in wm.items()}
        for f in sorted(set(files.values())):
            if not f.is_file():
                raise CheckpointError(f"{f}: shard listed in {INDEX_FILE} is missing.")
        return files
    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        raise CheckpointError(f"{path}: no *.safetensors file (and no {INDEX_FILE}).")
    files = {}
    for f in shards:
        for name in _open(f).keys():
            files[name] = f
    return files


def _open(f: pathlib.Path):
    try:
        return safe_open(str(f), framework="numpy")
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{f}: unreadable or truncated safetensors file ({e}); copy the "
                              f"checkpoint again from an intact source (or save it anew with "
                              f"hf.save), or point at another policy.") from None


def load(path: str | os.PathLike, dtype=jnp.float32, *, mesh: Optional[jax.sharding.Mesh] = None,
         fsdp: bool = False, compute_dtype=None) -> Qwen2:
    """HF dir (config.json + *.safetensors) -> Qwen2 with parameters in `dtype`.

    With `mesh`, each tensor is placed directly with its sharding.
    """
    path = pathlib.Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory not found.")
    cfg = read_config(path)
    files = _weight_map(path)
    compute_dtype = compute_dtype or dtype
    abstract = nnx.eval_shape(lambda: Qwen2(cfg, rngs=nnx.Rngs(0), dtype=compute_dtype,
                                            param_dtype=dtype))
    graphdef, state = nnx.split(abstract)
    flat = dict(nnx.to_flat_state(state))
    handles = {}
    try:
        for name, spath, transpose in param_table(cfg):
            f = files.get(name)
            if f is None:
                raise CheckpointError(f"{path}: tensor {name!r} is missing from the checkpoint.")
            if f not in handles:
                handles[f] = _open(f)
            try:
                arr = handles[f].get_tensor(name)
            except (SafetensorError, OSError, ValueError) as e:
                raise CheckpointError(f"{f}: tensor {name!r} unreadable ({e}).") from None
            if transpose:
                arr = arr.T
            var = flat[spath]
            expected = tuple(var.get_value().shape)
            if tuple(arr.shape) != expected:
                raise CheckpointError(
                    f"{f}: tensor {name!r} has shape {tuple(arr.shape)}, expected {expected} "
                    f"for this config.json.")
            arr = np.asarray(arr).astype(np.dtype(dtype), copy=False)
            if mesh is not None:
                value = jax.device_put(arr, shd.variable_sharding(var, mesh, fsdp))
            else:
                value = jnp.asarray(arr)
            flat[spath] = var.replace(value)
            del arr
    finally:
        handles.clear()
    state = nnx.from_flat_state(flat)
    return nnx.merge(graphdef, state)


def save(model: Qwen2, path: str | os.PathLike, *, tokenizer=None,
         max_shard_bytes: int = 4 << 30, dtype=None) -> pathlib.Path:
    """Write `model` as an HF directory (config.json, safetensors shards + index if large).

    The directory is written to a temporary sibling and renamed, so an interrupted save
    never leaves a half checkpoint in `path`. `tokenizer` (a transformers tokenizer) is
    saved beside it when given.
    """
    path = pathlib.Path(path)
    cfg = model.config
    tmp = path.with_name(path.name + ".tmp-save")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:       # a failed write (a full disk) leaves no half directory behind
        tmp.mkdir(parents=True)
        _, state = nnx.split(model)
        flat = dict(nnx.to_flat_state(state))
        tensors, shards, size = {}, [], 0
        for name, spath, transpose in param_table(cfg):
            arr = np.asarray(jax.device_get(flat[spath][...]))
            if dtype is not None:
                arr = arr.astype(np.dtype(dtype))
            if transpose:
                arr = arr.T
            arr = np.ascontiguousarray(arr)
            if tensors and size + arr.nbytes > max_shard_bytes:
                shards.append(tensors)
                tensors, size = {}, 0
            tensors[name] = arr
            size += arr.nbytes
        shards.append(tensors)
        hf_cfg = cfg.to_hf_dict()
        first = next(iter(shards[0].values()))
        hf_cfg["torch_dtype"] = {np.dtype(np.float32): "float32",
                                 np.dtype(np.float16): "float16",
                                 np.dtype(ml_dtypes.bfloat16): "bfloat16"}.get(first.dtype,
                                                                               "float32")
        hf_cfg["dtype"] = hf_cfg["torch_dtype"]
        (tmp / "config.json").write_text(json.dumps(hf_cfg, indent=2))
        if len(shards) == 1:
            save_file(shards[0], str(tmp / SINGLE_FILE), metadata={"format": "pt"})
        else:
            weight_map, total = {}, 0
            for i, sh in enumerate(shards):
                fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
                save_file(sh, str(tmp / fname), metadata={"format": "pt"})
                for name, arr in sh.items():
                    weight_map[name] = fname
                    total += arr.nbytes
            (tmp / INDEX_FILE).write_text(json.dumps(
                {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(e, OSError) and "No space left on device" in str(e):
            # safetensors says ENOSPC in its own exception type: make it the OSError it is
            raise OSError(errno.ENOSPC, f"no space left on device saving {path} ({e})") from e
        raise
    if path.exists():
        old = path.with_name(path.name + ".old-save")
        if old.exists():
            shutil.rmtree(old)
        path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old)
    else:
        tmp.rename(path)
    return path


def fingerprint(model: Qwen2, per_leaf: int = 4096) -> str:
    """A short hash that tells two policies apart: over every parameter's name, shape, dtype
    and first `per_leaf` values, as loaded (so it is cheap for a 7B model, and a bfloat16
    load of a float32 checkpoint is a different policy). Two trainings that diverge differ
    in nearly every leaf's leading values within a few updates; a change confined to values
    past the first `per_leaf` of every leaf would go unseen."""
    h = hashlib.sha256()
    flat = sorted(nnx.to_flat_state(nnx.state(model, nnx.Param)), key=lambda kv: str(kv[0]))
    for path, var in flat:
        x = var.value if hasattr(var, "value") else var
        h.update(f"{path}{tuple(x.shape)}{x.dtype}".encode())
        h.update(np.asarray(jnp.ravel(x)[:per_leaf]).astype(np.float32).tobytes())
    return h.hexdigest()[:12]


def load_tokenizer(path: str | os.PathLike):
    """The tokenizer saved beside a checkpoint (transformers.AutoTokenizer)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    try:
        cfg_file = pathlib.Path(path) / "tokenizer_config.json"
        cls = json.loads(cfg_file.read_text()).get("tokenizer_class") if cfg_file.is_file() else None
        if cls in ("TokenizersBackend", "PreTrainedTokenizerFast"):
            # A plain tokenizers.json (e.g. the warm start's line-level BPE): load it as is.
            # AutoTokenizer would pick Qwen2Tokenizer from config.json and swap in Qwen's
            # pre-tokenizer, changing every encoding.
            return PreTrainedTokenizerFast.from_pretrained(str(path))
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{_broken_tokenizer_file(path)}: no loadable tokenizer ({e}); "
                              f"copy the tokenizer files again from the policy they were saved "
                              f"with (tokenizer.save_pretrained), or point at another "
                              f"policy.") from None


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.json")


def _broken_tokenizer_file(path) -> pathlib.Path:
    """The first tokenizer file beside a checkpoint that is not JSON (else the directory)."""
    for name in TOKENIZER_FILES:
        f = pathlib.Path(path) / name
        if f.is_file():
            try:
                json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return f
    return pathlib.Path(path)
