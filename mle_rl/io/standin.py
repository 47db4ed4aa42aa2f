"""A stand-in for a real checkpoint: a Qwen2.5-shaped policy with random weights, saved as an
HF directory with a real 151,936-entry byte-level BPE tokenizer (no weights can be
downloaded here; the shapes, the vocabulary and the chat format are what matter).

    path = standin.build("checkpoints/standin-0.5b", preset="qwen2p5_0p5b", dtype="bfloat16")
    model, tokenizer = policy.load(path, dtype="bfloat16")     # AutoTokenizer loads it

The tokenizer is Qwen2's design, trained here: NFC, Qwen2's pre-tokenizer regex, byte-level
BPE trained on the source text (code and docstrings) of installed libraries, its regular
vocabulary padded with unreachable `<|reserved_N|>` entries up to id 151,642, Qwen2.5's 22
special tokens at their real ids (`<|endoftext|>` 151643 = padding, `<|im_start|>` 151644,
`<|im_end|>` 151645 = EOS), reserved specials up to the embedding size, and Qwen2.5's chat
template (its default system prompt; no tools). The trained tokenizer is cached
(`tokenizer_cache`) since training takes minutes.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys
import time
from typing import Iterator, Optional

QWEN2_SPECIALS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
    "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")
FIRST_SPECIAL_ID = 151643        # Qwen2's regular vocabulary: ids 0 .. 151642
QWEN2_PRETOKENIZE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                     r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message['role'] == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
CORPUS_PACKAGES = ("numpy", "scipy", "sklearn", "pandas", "jax", "flax", "optax", "torch",
                   "transformers", "tokenizers", "absl", "chex", "orbax")


def corpus(max_bytes: int) -> Iterator[str]:
    """Source files (code and docstrings) of installed libraries, in a fixed order, up to
    `max_bytes` in all."""
    import importlib.util
    total = 0
    for name in CORPUS_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        for root in spec.submodule_search_locations:
            for f in sorted(pathlib.Path(root).rglob("*.py")):
                try:
                    text = f.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                yield text
                total += len(text)
                if total >= max_bytes:
                    return


def train_tokenizer(vocab_size: int = 151936, corpus_bytes: int = 64 << 20, log=print):
    """A `transformers.PreTrainedTokenizerFast` with `vocab_size` entries (see the module
    docstring); `vocab_size` must leave room for Qwen2's special tokens after id 151642."""
    from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            trainers)
    from transformers import PreTrainedTokenizerFast
    if vocab_size < FIRST_SPECIAL_ID + len(QWEN2_SPECIALS):
        raise ValueError(f"vocab_size={vocab_size} leaves no room for Qwen2's special tokens "
                         f"(ids {FIRST_SPECIAL_ID}..{FIRST_SPECIAL_ID + len(QWEN2_SPECIALS) - 1}).")

    def pipeline(tok):
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        return tok

    t0 = time.monotonic()
    tok = pipeline(Tokenizer(models.BPE()))
    trainer = trainers.BpeTrainer(vocab_size=FIRST_SPECIAL_ID, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(corpus_bytes), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    vocab, merges = model["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1))
                                     for m in model["merges"]]
    trained = len(vocab)
    for i in range(trained, FIRST_SPECIAL_ID):          # unreachable: no merge makes them
        vocab[f"<|reserved_{i}|>"] = i
    full = pipeline(Tokenizer(models.BPE(vocab=vocab, merges=merges)))
    specials = list(QWEN2_SPECIALS) + [f"<|reserved_special_{i}|>" for i in range(
        FIRST_SPECIAL_ID + len(QWEN2_SPECIALS), vocab_size)]
    full.add_special_tokens(specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=full, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", bos_token=None, unk_token=None,
                                   model_max_length=32768)
    fast.chat_template = CHAT_TEMPLATE
    log(f"[standin] byte-level BPE: {trained:,} trained entries ({corpus_bytes >> 20} MB of "
        f"library source, {time.monotonic() - t0:.0f} s), padded to {len(fast):,}")
    return fast


def tokenizer_cache() -> pathlib.Path:
    import os
    root = os.environ.get("MLE_RL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                          "mle_rl")
    return pathlib.Path(root) / "standin_tokenizer_151936"


def load_or_train_tokenizer(cache: Optional[pathlib.Path] = None, log=print):
    """The trained tokenizer from `cache` (default `tokenizer_cache()`), trained and saved
    there first when missing."""
    from transformers import PreTrainedTokenizerFast
    cache = pathlib.Path(cache or tokenizer_cache())
    if not (cache / "tokenizer.json").is_file():
        tok = train_tokenizer(log=log)
        tmp = cache.with_name(cache.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tok.save_pretrained(str(tmp))
        shutil.rmtree(cache, ignore_errors=True)
        tmp.rename(cache)
    tok = PreTrainedTokenizerFast.from_pretrained(str(cache))
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build(path, *, preset: str = "qwen2p5_0p5b", dtype: str = "float32", seed: int = 0,
          tokenizer=None, log=print) -> pathlib.Path:
    """Random-init `preset` in `dtype`, saved at `path` with the stand-in tokenizer (marked
    `Qwen2Tokenizer` like a real Qwen2.5 directory, so `AutoTokenizer` picks Qwen's class)."""
    from mle_rl.io.policy import DTYPES
    from mle_rl.models import config as mcfg, hf, qwen2
    cfg = mcfg.preset(preset)
    tok = tokenizer or load_or_train_tokenizer(log=log)
    if len(tok) > cfg.vocab_size:
        raise ValueError(f"the tokenizer has {len(tok)} entries, more than {preset}'s "
                         f"{cfg.vocab_size}-row embedding.")
    t0 = time.monotonic()
    model = qwen2.init_model(cfg, seed=seed, dtype=DTYPES[dtype], param_dtype=DTYPES[dtype])
    out = hf.save(model, path, tokenizer=tok)
    tc = out / "tokenizer_config.json"
    tcfg = json.loads(tc.read_text())
    tcfg.update(tokenizer_class="Qwen2Tokenizer", chat_template=CHAT_TEMPLATE)
    tc.write_text(json.dumps(tcfg, indent=2))
    gen = {"bos_token_id": cfg.bos_token_id, "eos_token_id": [FIRST_SPECIAL_ID + 2,
                                                              FIRST_SPECIAL_ID],
           "pad_token_id": FIRST_SPECIAL_ID}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    log(f"[standin] {preset} ({cfg.num_params:,} parameters, {dtype}) -> {out} "
        f"({time.monotonic() - t0:.0f} s)")
    return out


if __name__ == "__main__":          # python -m mle_rl.io.standin DIR [PRESET [DTYPE]]
    build(sys.argv[1], preset=(sys.argv[2:] or ["qwen2p5_0p5b"])[0],
          dtype=(sys.argv[3:] or ["float32"])[0])
