"""A policy with its tokenizer, and prompt text <-> token ids.

`load(path)` reads an HF checkpoint directory (config.json + safetensors + tokenizer);
`load(None)` is a random init of a preset with a byte-level tokenizer (`ByteTokenizer`, for
tests and smoke runs: it writes no working code). Which directory `--policy_dir` names
(`default`: the cached policy the warm start builds) is decided above this layer, in
`agent/components.py: load_policy`.
"""

from __future__ import annotations

import pathlib
from typing import Optional, Sequence

import jax.numpy as jnp

from mle_rl.models import config as mcfg
from mle_rl.models import hf, qwen2

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


class ByteTokenizer:
    """UTF-8 bytes as tokens 0..255, plus EOS (256) and PAD (257)."""

    eos_token_id = 256
    pad_token_id = 257
    chat_template = None
    vocab_size = 258

    def encode(self, text: str, add_special_tokens: bool = False) -> list:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")

    def __len__(self):
        return self.vocab_size


def load(path: Optional[pathlib.Path], *, preset: str = "tiny", dtype: str = "float32",
         seed: int = 0):
    """-> (model, tokenizer): the HF checkpoint at `path`, or (None) a random `preset`."""
    jdtype = DTYPES[dtype]
    if path is None:
        model = qwen2.init_model(mcfg.preset(preset), seed=seed, dtype=jdtype, param_dtype=jdtype)
        return model, ByteTokenizer()
    return hf.load(path, dtype=jdtype), hf.load_tokenizer(path)


def encode_prompt(tokenizer, text: str) -> list:
    """Prompt text -> token ids, through the chat template when the tokenizer has one."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                            add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):          # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)
    return list(tokenizer.encode(text, add_special_tokens=False))


def eos_ids(tokenizer, model_config) -> tuple:
    ids = set()
    for x in (getattr(tokenizer, "eos_token_id", None), model_config.eos_token_id):
        if isinstance(x, (list, tuple)):
            ids.update(int(i) for i in x)
        elif x is not None:
            ids.add(int(x))
    return tuple(sorted(ids))


def pad_id(tokenizer) -> int:
    p = getattr(tokenizer, "pad_token_id", None)
    if p is None:
        p = getattr(tokenizer, "eos_token_id", None)
    return int(p) if p is not None else 0


def decode_response(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=True)
