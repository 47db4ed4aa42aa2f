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


BLOCK = ('from sklearn.ensemble import RandomForestClassifier\n'
         'model = RandomForestClassifier(n_estimators=100, random_state=0)\n'
         'grid = {"min_samples_leaf": [1, 5]}\n\n')


def test_a_repeated_code_block_is_one_token():
    """Paragraph pre-tokens: a block the corpus repeats becomes one token, imports and the
    code that uses them together; an unseen block still round-trips byte-level."""
    texts = [f"x = {i}\n\n" + BLOCK + "print(model)\n" for i in range(6)]
    tok = tok_lib.train(texts, vocab_size=2000)
    ids = tok(BLOCK, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1 and tok.decode(ids) == BLOCK
    unseen = "from sklearn.svm import SVC\nmodel = SVC()\n\n"
    assert tok.decode(tok(unseen, add_special_tokens=False)["input_ids"]) == unseen


def test_numbered_listing_lines_are_separate_pre_tokens():
    """Merges never cross the lines of an `lm_instrument.numbered` listing, so `after N:`
    answers can point at single lines."""
    from mle_rl.warmstart import lm_instrument
    listing = lm_instrument.numbered("a = 1\nb = 2\nc = 3\n")
    tok = tok_lib.train([listing] * 8, vocab_size=2000)
    pieces = [tok.decode([i]) for i in tok(listing, add_special_tokens=False)["input_ids"]]
    assert pieces == listing.splitlines(keepends=True)
