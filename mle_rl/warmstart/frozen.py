"""A frozen model as a text generator, and the LM instrumenter built on it.

    inst = load_lm_instrumenter()              # the default CPU policy (built if missing)
    inst = load_lm_instrumenter(base_model_dir) # a real checkpoint: the *base* model
    result = inst.instrument(code, nonce); inst.stats()

The model is loaded once and never updated: pass the base model's directory (or the
warm-start policy on CPU), never the checkpoint of the policy being trained.
"""

from __future__ import annotations

from typing import Callable, Optional

from mle_rl.warmstart import lm_instrument


def load_tokenizer(policy_dir):
    """The tokenizer saved in `policy_dir`, exactly as trained.

    `transformers.AutoTokenizer` (5.x) maps a `qwen2` config to `Qwen2Tokenizer`, which
    replaces the saved pre-tokenizer with Qwen2's word-splitting regex; the warm-start BPE
    splits on lines instead, so it is loaded from its `tokenizer.json` as is."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(policy_dir))


class FrozenGenerator:
    """`prompt text -> completion text` from an HF directory, greedy, one chat turn."""

    def __init__(self, policy_dir, *, max_new_tokens: int = 192):
        from mle_rl.models import hf

        self.model = hf.load(policy_dir)
        self.tok = load_tokenizer(policy_dir)
        self.max_new_tokens = max_new_tokens

    def __call__(self, prompt: str) -> str:
        from mle_rl.warmstart.evaluate import generate_texts

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


__all__ = ["FrozenGenerator", "load_lm_instrumenter"]
