"""The frozen-LM instrumenter: acceptance check, nonce tagging, fallback counting."""

from mle_rl.env import instrument as inst
from mle_rl.warmstart import lm_instrument as lmi

CODE = '''import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
train = pd.read_csv("input/train.csv")
model = LogisticRegression()
for i in range(2):
    model.fit(train[["a"]], train["y"])
pred = model.predict_proba(train[["a"]])[:, 1]
pd.DataFrame({"p": pred}).to_csv("submission.csv", index=False)
'''


def test_reference_answer_is_accepted_and_tagged_with_the_nonce():
    answer = lmi.reference_answer(CODE)
    assert 'after 3: print("[[NONCE:imports]]")' in answer
    assert "after 7: " in answer          # model_trained: inside the loop body
    lm = lmi.LMInstrumenter(lambda prompt: answer)
    res = lm.instrument(CODE, "abc123")
    assert not res.fallback and lm.stats() == {"calls": 1, "accepted": 1, "fallbacks": 0}
    assert set(res.inserted) >= {"imports", "data_loaded", "model_built", "model_trained"}
    assert "NONCE" not in res.code and "[[abc123:model_trained]]" in res.code
    compile(res.code, "x", "exec")
    # removing the guarded prints gives back the original program
    assert lmi.same_program(CODE, lmi.apply_answer(CODE, answer)[0], "[[NONCE:")


def test_changed_program_is_rejected():
    new = lmi.apply_answer(CODE, lmi.reference_answer(CODE))[0]
    changed = new.replace("LogisticRegression()", "LogisticRegression(C=9)")
    assert not lmi.same_program(CODE, changed, "[[NONCE:")
    plain_print = new.replace('print("[[NONCE:imports]]")', 'print("hello")')
    assert not lmi.same_program(CODE, plain_print, "[[NONCE:")


def test_handcrafted_bad_answers_fall_back_and_are_counted():
    bad = [
        'after 3: print("[[NONCE:imports]]"); model = None',   # smuggles a statement
        'after 99: print("[[NONCE:imports]]")',               # no such line
        'after 6: print("[[NONCE:model_trained]]")',          # after `for ...:` -> breaks
        'after 4: x = print("[[NONCE:data_loaded]]")',        # not the expected form
        "I don't know",
    ]
    lm = lmi.LMInstrumenter(lambda prompt, it=iter(bad): next(it))
    for _ in bad:
        res = lm.instrument(CODE, "n0nce")
        ast_res = inst.AstInstrumenter().instrument(CODE, "n0nce")
        assert res.code == ast_res.code              # the AST instrumenter's program
    assert lm.stats() == {"calls": 5, "accepted": 0, "fallbacks": 5}


def test_model_errors_fall_back():
    def broken(prompt):
        raise RuntimeError("model crashed")
    lm = lmi.LMInstrumenter(broken)
    res = lm.instrument(CODE, "n0nce")
    assert "[[n0nce:" in res.code and lm.fallbacks == 1


def test_prompt_numbers_lines():
    p = lmi.instrument_prompt(CODE)
    assert "  4| train = pd.read_csv" in p and "NONCE" in p


def test_frozen_model_instrumenter_counts_fallbacks(tmp_path):
    """An untrained frozen model answers garbage: every call falls back, and is counted."""
    from mle_rl.models import hf, qwen2
    from mle_rl.models.config import ModelConfig
    from mle_rl.warmstart import frozen, tokenizer as tok_lib

    tok = tok_lib.train([CODE, lmi.instrument_prompt(CODE), lmi.reference_answer(CODE)] * 3,
                        vocab_size=300)
    cfg = ModelConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_layers=1,
                      num_heads=2, num_kv_heads=1, head_dim=16, rope_theta=10000.0,
                      tie_word_embeddings=True, max_position_embeddings=512)
    hf.save(qwen2.init_model(cfg, seed=0), tmp_path / "p", tokenizer=tok)
    inst_ = frozen.load_lm_instrumenter(tmp_path / "p", max_new_tokens=8)
    res = inst_.instrument(CODE, "n0nce")
    assert res.code == inst.AstInstrumenter().instrument(CODE, "n0nce").code
    assert inst_.stats() == {"calls": 1, "accepted": 0, "fallbacks": 1}


def test_actor_work_reports_who_instrumented_each_program(tmp_path):
    """In an actor with `--instrument=lm`, each result says whether the frozen LM's prints
    were used ("lm") or refused and replaced by the AST's ("lm_fallback"); the trainer
    turns that into `lm_instrument_accept_frac`."""
    from mle_rl.agent import actor_process as ap
    from mle_rl.agent.actors import ActionRequest
    from mle_rl.warmstart import generic

    plan, code = generic.render(generic.Choice("auc", "random_forest", 2, 2, "median_scale",
                                               "holdout"))
    response = f"{plan}\n\n```python\n{code}```"
    kinds = []
    for answer in (lmi.reference_answer, lambda code: "after 999: print(1)\n"):
        ctx = ap.ActorContext(0, {"instrumenter": "lm:unused", "cache_dir": str(tmp_path)})
        ctx.cache["lm_instrumenter"] = lmi.LMInstrumenter(
            lambda prompt, a=answer: a(code))
        req = ActionRequest(request_id=0, task_id="breast-cancer-diagnosis", response=response,
                            policy_version=0, nonce="n0nce1")
        res = ap.default_work(req, ctx)
        assert res.status == "ok", res.stderr_tail
        assert len(res.hits) >= 3
        kinds.append(res.instrumented_by)
    assert kinds == ["lm", "lm_fallback"]
