"""The warm-start BPE: round trip, special tokens, AutoTokenizer load, chat template."""

from transformers import AutoTokenizer

from mle_rl.warmstart import tokenizer as tok_lib

TEXTS = ['import numpy as np\nimport pandas as pd\ntrain = pd.read_csv("input/train.csv")\n',
         "I will use a random forest. Features: raw pixels.\n",
         "Ünïcode — 漢字 and tabs\tand\r\nCRLF"] * 5


def test_round_trip_and_autotokenizer_load(tmp_path):
    tok = tok_lib.train(TEXTS, vocab_size=400)
    tok_lib.save(tok, tmp_path)
    loaded = AutoTokenizer.from_pretrained(str(tmp_path))
    for t in TEXTS[:3] + ["never seen: αβγ 123 {x: [y]}"]:
        ids = loaded(t, add_special_tokens=False)["input_ids"]
        assert loaded.decode(ids) == t
    assert loaded.eos_token == "<|im_end|>" and loaded.pad_token == "<|endoftext|>"
    im_end = loaded.convert_tokens_to_ids("<|im_end|>")
    assert loaded("a<|im_end|>", add_special_tokens=False)["input_ids"][-1] == im_end


def test_repeated_lines_compress(tmp_path):
    tok = tok_lib.train(TEXTS, vocab_size=400)
    line = 'train = pd.read_csv("input/train.csv")\n'
    assert len(tok(line, add_special_tokens=False)["input_ids"]) <= 3
    assert tok_lib.bytes_per_token(tok, TEXTS[:2]) > 8


def test_chat_template_matches_user_turn(tmp_path):
    tok = tok_lib.train(TEXTS, vocab_size=400)
    tok_lib.save(tok, tmp_path)
    loaded = AutoTokenizer.from_pretrained(str(tmp_path))
    text = loaded.apply_chat_template([{"role": "user", "content": "Solve it."}],
                                      tokenize=False, add_generation_prompt=True)
    assert text == tok_lib.user_turn("Solve it.")
