"""The real-shapes stand-in (`mle_rl/io/standin.py`): a 151,936-entry Qwen2-style byte-level
BPE with Qwen2.5's special tokens and chat template, and the HF directory it is saved in."""

import json

import pytest

from mle_rl.io import policy, standin


@pytest.fixture(scope="module")
def tokenizer():
    # A small corpus keeps training to seconds; the vocabulary is padded to full size.
    return standin.train_tokenizer(corpus_bytes=256 << 10, log=lambda *_: None)


def test_vocabulary_size_and_qwen2_special_ids(tokenizer):
    assert len(tokenizer) == 151936
    ids = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    assert ids == [151643, 151644, 151645]
    assert tokenizer.eos_token_id == 151645 and tokenizer.pad_token_id == 151643
    assert tokenizer.convert_tokens_to_ids("<|file_sep|>") == 151664
    assert tokenizer.convert_ids_to_tokens(151935) == "<|reserved_special_151935|>"


def test_text_round_trips_and_the_chat_template_is_qwens(tokenizer):
    code = "import numpy as np\n\ndef f(x):\n    return np.mean(x) * 2  # ünïcode\n"
    ids = tokenizer.encode(code, add_special_tokens=False)
    assert max(ids) < standin.FIRST_SPECIAL_ID             # no special or reserved entry
    assert tokenizer.decode(ids) == code
    prompt = policy.encode_prompt(tokenizer, "Solve the task.")
    text = tokenizer.decode(prompt)
    assert text.startswith("<|im_start|>system\nYou are Qwen")
    assert text.endswith("<|im_start|>user\nSolve the task.<|im_end|>\n<|im_start|>assistant\n")
    reply = tokenizer.encode("print(1)", add_special_tokens=False) + [151645, 151643]
    assert policy.decode_response(tokenizer, reply) == "print(1)"       # specials dropped


def test_a_too_small_vocabulary_is_refused():
    with pytest.raises(ValueError, match="no room for Qwen2's special tokens"):
        standin.train_tokenizer(vocab_size=151000)


@pytest.mark.slow
def test_built_0p5b_directory_loads_with_our_loader_and_transformers(tmp_path, tokenizer):
    """The Qwen2.5-0.5B-shaped directory (~1 GB in bfloat16): config, weights, tokenizer
    (AutoTokenizer picks Qwen2's class) and generation config, as a real one."""
    import transformers
    from mle_rl.models import config as mcfg
    path = standin.build(tmp_path / "p", preset="qwen2p5_0p5b", dtype="bfloat16",
                         tokenizer=tokenizer, log=lambda *_: None)
    cfg = json.loads((path / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]) == (24, 896, 151936)
    assert cfg["tie_word_embeddings"] is True
    model, tok = policy.load(path, dtype="bfloat16")
    assert model.config == mcfg.qwen2p5_0p5b()
    assert len(tok) == 151936 and tok.eos_token_id == 151645
    auto = transformers.AutoTokenizer.from_pretrained(str(path))
    assert type(auto).__name__.startswith("Qwen2Tokenizer")
    assert auto.encode("def f(): pass") == tok.encode("def f(): pass")
    gen = json.loads((path / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [151645, 151643] and gen["pad_token_id"] == 151643
