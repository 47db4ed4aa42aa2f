"""A frozen model as a text generator, and the LM instrumenter built on it.

    texts = generate_texts(model, tok, prompts, max_new_tokens=..., temperature=0.0, seed=0)
    inst = load_lm_instrumenter()              # the default CPU policy (built if missing)
    inst = load_lm_instrumenter(base_model_dir) # a real checkpoint: the *base* model
    result = inst.instrument(code, nonce); inst.stats()

The model is loaded once and never updated: pass the base model's directory (or the
warm-start policy on CPU), never the checkpoint of the policy being trained.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np

from mle_rl import sampling
from mle_rl.warmstart import lm_instrument
from mle_rl.warmstart.tokenizer import user_turn


def load_tokenizer(policy_dir):
    """The tokenizer saved in `policy_dir`, exactly as trained.

    `transformers.AutoTokenizer` (5.x) maps a `qwen2` config to `Qwen2Tokenizer`, which
    replaces the saved pre-tokenizer with Qwen2's word-splitting regex; the warm-start BPE
    splits on lines instead, so it is loaded from its `tokenizer.json` as is."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(policy_dir))


def generate_texts(model, tok, prompt_texts: Sequence[str], *, max_new_tokens: int,
                   temperature: float, seed: int, batch: int = 32) -> list[str]:
    """Decoded completions of chat-wrapped `prompt_texts` (stopped at <|im_end|>)."""
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    out = []
    for i in range(0, len(prompt_texts), batch):
        ids = [tok(user_turn(p), add_special_tokens=False)["input_ids"]
               for p in prompt_texts[i:i + batch]]
        res = sampling.generate(model, ids, max_new_tokens=max_new_tokens,
                                rng=jax.random.key(seed + i), temperature=temperature,
                                eos_ids=(eos,), pad_id=pad)
        for row, n in zip(np.asarray(res.tokens), np.asarray(res.lengths)):
            out.append(tok.decode([int(t) for t in row[:int(n)] if int(t) != eos],
                                  skip_special_tokens=True))
    return out


class FrozenGenerator:
    """`prompt text -> completion text` from an HF directory, greedy, one chat turn."""

    def __init__(self, policy_dir, *, max_new_tokens: int = 192):
        from mle_rl.models import hf

        self.model = hf.load(policy_dir)
        self.tok = load_tokenizer(policy_dir)
        self.max_new_tokens = max_new_tokens

    def __call__(self, prompt: str) -> str:
        return generate_texts(self.model, self.tok, [prompt], max_new_tokens=self.max_new_tokens,
                              temperature=0.0, seed=0)[0]


def load_lm_instrumenter(policy_dir=None, *, cache_dir=None, log: Callable = print,
                         max_new_tokens: int = 192) -> lm_instrument.LMInstrumenter:
    """An `LMInstrumenter` over the frozen model in `policy_dir` (default: the default CPU
    policy, built first when missing)."""
    if policy_dir is None:
        from mle_rl.warmstart.pipeline import ensure_default_policy

        policy_dir = ensure_default_policy(cache_dir, log=log)
    return lm_instrument.LMInstrumenter(FrozenGenerator(policy_dir,
                                                        max_new_tokens=max_new_tokens))


__all__ = ["FrozenGenerator", "generate_texts", "load_lm_instrumenter", "load_tokenizer"]
