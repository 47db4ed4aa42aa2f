"""The AST instrumenter inserts nonce-tagged prints after the 7 steps, never breaks a
program, and only prints carrying this execution's nonce count."""

import ast

import pytest

from tests._tiny_task import GOOD_CODE, make_tiny_task
from mle_rl.env import action, instrument, rewards

FULL = '''\
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score


def main():
    train = pd.read_csv("input/train.csv")
    test = pd.read_csv("input/test.csv")
    model = LogisticRegression()
    model.fit(train[["x"]], train.y)
    val_acc = accuracy_score(train.y, model.predict(train[["x"]]))
    print("validation accuracy", val_acc)
    pred = model.predict(test[["x"]])
    pd.DataFrame({"id": test.id, "y": pred}).to_csv("submission.csv", index=False)


if __name__ == "__main__":
    main()
'''


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return make_tiny_task(tmp_path_factory.mktemp("instrument"))


def test_all_seven_steps_are_inserted_in_order():
    out = instrument.AstInstrumenter().instrument(FULL, "n0nce")
    assert not out.fallback
    assert out.inserted == instrument.STEPS
    lines = out.code.splitlines()
    where = {s: next(i for i, ln in enumerate(lines) if f"[[n0nce:{s}]]" in ln)
             for s in instrument.STEPS}
    assert where["imports"] < where["data_loaded"] < where["model_built"] < \
        where["model_trained"] < where["validation_metric"] < where["predicted"] < \
        where["submission_written"]
    # The print follows its statement: e.g. model_trained's block comes right after `.fit(`.
    fit = next(i for i, ln in enumerate(lines) if ".fit(" in ln)
    assert lines[fit + 1].strip() == "try:"
    assert fit < where["model_trained"] <= fit + 6


def test_a_step_prints_once_from_whichever_of_its_statements_runs(task):
    """Every statement of a step is instrumented: a `.fit` in a branch that never runs does
    not hide the one that does, and a fit in a loop prints its marker once."""
    code = '''\
import pandas as pd
from sklearn.linear_model import LogisticRegression
train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
if "no_such_column" in train.columns:
    unused = LogisticRegression().fit(train[["no_such_column"]], train["y"])
for fold in range(3):
    model = LogisticRegression(max_iter=200)
    model.fit(train[["x"]], train["y"])
pd.DataFrame({"id": test["id"], "y": model.predict(test[["x"]])}).to_csv(
    "submission.csv", index=False)
'''
    out = instrument.AstInstrumenter().instrument(code, "c0de")
    assert out.code.count("[[c0de:model_trained]]") == 2       # both fits instrumented
    res = action.run_code(task, code)
    assert res.status == "ok", res.message
    for step in ("data_loaded", "model_built", "model_trained", "predicted",
                 "submission_written"):
        assert step in res.hits
    shown = res.stdout_tail.count("model_trained]")              # with or without its nonce
    assert shown == 1, res.stdout_tail


def test_deterministic_and_nonce_dependent():
    a = instrument.AstInstrumenter().instrument(FULL, "aaaa")
    b = instrument.AstInstrumenter().instrument(FULL, "aaaa")
    c = instrument.AstInstrumenter().instrument(FULL, "bbbb")
    assert a == b and a.code != c.code and "aaaa" not in c.code


def test_instrumented_program_runs_and_hits_all_steps(task):
    res = action.run_code(task, FULL, nonce="feedc0de")
    assert res.status == "ok", res.stderr_tail
    assert res.hits == instrument.STEPS
    assert "[[feedc0de:validation_metric]] 1.0" in res.stdout_tail
    assert res.reward == rewards.rl4mle("ok", res.score, False, 7) == 1.0


def test_failing_program_gets_partial_credit_for_steps_reached(task):
    code = FULL.replace("    pred = model.predict", "    raise RuntimeError('late bug')\n"
                        "    pred = model.predict")
    res = action.run_code(task, code, nonce="0badc0de")
    assert res.status == "error"
    assert res.hits == ("imports", "data_loaded", "model_built", "model_trained",
                        "validation_metric")
    assert res.reward == pytest.approx(-10 + 0.1 * 5)


def test_forged_markers_without_the_nonce_earn_nothing(task):
    forged = "\n".join(
        f"print('[[{tag}{step}]] 1.0')" for step in instrument.STEPS
        for tag in ("", "deadbeef:", "0123456789abcdef:", "feedc0de:"))
    code = f"import sys\n{forged}\nsys.exit(1)\n"
    res = action.run_code(task, code, nonce="a1b2c3d4e5f60718")
    assert res.status == "error"
    assert res.hits == ("imports",)  # only the real, inserted print after `import sys`
    res = action.run_code(task, f"{forged}\nraise SystemExit(1)\n", nonce="a1b2c3d4e5f60718")
    assert res.hits == () and res.reward == -10.0


def test_match_hits_rules():
    n = "c0ffee"
    out = (f"[[{n}:imports]]\n[[{n}:imports]] again\nnoise [[{n}:predicted]]\n"
           f"[[other:model_built]]\n[[{n}:model_trained]] 0.9\n[[{n}:bogus_step]]\n")
    assert instrument.match_hits(out, n) == ("imports", "model_trained")
    assert instrument.match_hits(out, "") == ()
    assert instrument.match_hits(out, ".*") == ()  # a nonce is never a regex


def test_new_nonce_is_random_hex():
    a, b = instrument.new_nonce(), instrument.new_nonce()
    assert a != b and len(a) == 16 and int(a, 16) >= 0


def test_print_values_never_break_the_program(task):
    code = '''\
import pandas as pd
class Weird:
    @property
    def shape(self):
        raise ValueError("no shape")
def read_csv(path):
    return Weird()
data = read_csv("input/train.csv")
pd.DataFrame({"id": range(40, 50), "y": 1}).to_csv("submission.csv", index=False)
'''
    out = instrument.AstInstrumenter().instrument(code, "abcd")
    assert "data_loaded" in out.inserted
    res = action.run_code(task, code, nonce="abcd")
    assert res.status == "ok", res.stderr_tail
    assert res.hits == ("imports", "data_loaded", "submission_written")


def test_nested_bodies_and_returns():
    code = '''\
import numpy as np
def load():
    return np.load("input/x.npy")
for fold in range(2):
    try:
        m = RandomForestClassifier()
    except Exception:
        pass
'''
    out = instrument.AstInstrumenter().instrument(code, "ab12")
    assert "data_loaded" not in out.inserted  # after a `return` a print would never run
    assert "model_built" in out.inserted
    ast.parse(out.code)


def test_unparseable_or_broken_instrumentation_runs_the_original(monkeypatch):
    bad = "def f(:\n    pass\n"
    out = instrument.AstInstrumenter().instrument(bad, "ab")
    assert out.fallback and out.code == bad and out.inserted == ()
    monkeypatch.setattr(instrument.ast, "unparse", lambda tree: "def (")
    out = instrument.AstInstrumenter().instrument(GOOD_CODE, "ab")
    assert out.fallback and out.code == GOOD_CODE


def test_strip_nonces_for_prompts():
    assert instrument.strip_nonces("[[ab12:predicted]] (10,)\nx") == "[predicted] (10,)\nx"


def test_get_instrumenter():
    assert instrument.get_instrumenter("ast").name == "ast"
    assert instrument.get_instrumenter(None).name == "none"
    with pytest.raises(ValueError, match="policy checkpoint"):
        instrument.get_instrumenter("lm")
    with pytest.raises(ValueError, match="Unknown instrumenter"):
        instrument.get_instrumenter("magic")


def test_markers_count_even_when_output_overflows_the_tail(task):
    code = FULL.replace('    print("validation accuracy", val_acc)\n',
                        '    print("validation accuracy", val_acc)\n'
                        '    for i in range(20000):\n        print("log line", i, "x" * 40)\n')
    res = action.run_code(task, code, nonce="5eed")
    assert res.status == "ok"
    assert "[[5eed:data_loaded]]" not in res.stdout_tail   # scrolled out of the tail ...
    assert res.hits == instrument.STEPS                    # ... but still counted
