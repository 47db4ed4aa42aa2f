"""A byte-level BPE for the default CPU policy, trained with `tokenizers` on the expert
corpus and the task descriptions, saved so `transformers.AutoTokenizer` loads it from the
policy directory. (A real checkpoint keeps its own tokenizer.)

Special tokens follow Qwen2's chat format: `<|im_start|>`, `<|im_end|>` (end of a turn:
the EOS the sampler stops at) and `<|endoftext|>` (padding). The chat template renders a
user turn and opens the assistant's, so `apply_chat_template(..., add_generation_prompt=True)`
gives exactly the text the policy was fine-tuned on.
"""

from __future__ import annotations

import pathlib
from typing import Iterable

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")


# Pre-tokens (merges never cross them): a paragraph (a run of non-empty lines and the blank
# lines after it), except that each line of a numbered listing (`lm_instrument.numbered`)
# stands alone. So a code block the corpus repeats (a blank-line-separated block of
# `programs`: its imports and its statements) becomes a single token, and a program is about
# ten tokens: the policy composes whole blocks, and one token carries a block's imports
# together with the code that uses them. Anything else still tokenizes, byte-level.
PRETOKEN = r"[ \d]{3}\| [^\n]*\n|(?:(?![ \d]{3}\| )[^\n]+\n)+\n*|[^\n]+|\n+"


def user_turn(prompt: str) -> str:
    """The text before the response: what `apply_chat_template` with a generation prompt
    renders for one user message."""
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def train(texts: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2):
    """A `transformers.PreTrainedTokenizerFast` (byte-level BPE) trained on `texts`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKEN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", bos_token=None,
                                   unk_token=None, model_max_length=4096)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def save(tokenizer, path) -> pathlib.Path:
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(path))
    return path


def bytes_per_token(tokenizer, texts: Iterable[str]) -> float:
    """UTF-8 bytes per token over `texts` (higher = better compression)."""
    n_bytes = n_tok = 0
    for t in texts:
        n_bytes += len(t.encode())
        n_tok += len(tokenizer(t, add_special_tokens=False)["input_ids"])
    return n_bytes / max(n_tok, 1)
