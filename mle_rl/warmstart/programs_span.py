"""The span-extraction skeleton (docstring-param-span): find the parameter's entry in the
flattened Parameters section, then a classifier scores each word of the entry as "the
description starts here"; the answer is the entry from the best-scored word on.

Data ideas: the word's own shape, or its shape and its neighbours'. Model ideas: the
task-generic programs' families, their paragraphs verbatim (a binary classifier; no SVM:
thousands of candidate words). Learning ideas: hold-out, early stopping, an average with a
second model.
"""

from __future__ import annotations

from mle_rl.warmstart.action_pool import Combo
from mle_rl.warmstart.generic_code import FAMILIES

# The plan's first paragraph; `programs.render` adds the ideas (`plan_text`).
APPROACH = ("Approach: find the parameter's entry and score each word as the start of its "
            "description.\n\n")

ENTRY = '''\
def entry(text, param):
    m = re.search(r"(^|[ ,])" + re.escape(param) + r"(, [^:]*)? : ", text)
    rest = text[m.end():] if m else text
    nxt = re.search(r" [*\\w]+(, [*\\w]+)* : ", rest)
    return (rest[:nxt.start()] if nxt else rest).split()

'''

SHAPE = '''\
def shape(w):
    return [w[:1].isupper(), w[-1:] in ",)}]", w.lower() in ("optional", "default"), len(w)]

def features(words):
    return [[i, i / len(words)] + shape(w) + shape(words[i - 1] if i else "") for i, w in enumerate(words)]

'''

CONTEXT = '''\
def shape(w):
    return [w[:1].isupper(), w[-1:] in ",)}]", w.lower() in ("optional", "default"), len(w)]

def features(words):
    pad = [""] + words + [""]
    return [[i, i / len(words)] + shape(pad[i]) + shape(pad[i + 1]) + shape(pad[i + 2]) for i in range(len(words))]

'''

TABLE = '''\
def table(df, labelled):
    X, y, groups = [], [], []
    for k, (text, param) in enumerate(zip(df["text"], df["param"])):
        words = entry(text, param)
        start = -1
        if labelled:
            span = df["selected_text"].iloc[k].split()
            start = next((i for i in range(len(words)) if words[i:i + len(span)] == span), -1)
        X += features(words)
        y += [i == start for i in range(len(words))]
        groups += [k] * len(words)
    return np.array(X, dtype=float), np.array(y), np.array(groups)

def extract(df, p, groups):
    out = []
    for k, (text, param) in enumerate(zip(df["text"], df["param"])):
        words = entry(text, param)
        best = int(np.argmax(p[groups == k])) if words else 0
        out.append(" ".join(words[best:]))
    return out

def jaccard(a, b):
    a, b = set(a.lower().split()), set(b.lower().split())
    return len(a & b) / max(len(a | b), 1)

'''

# The ensemble's second model: (import, constructor, the plan's phrase).
SECOND = {
    "linear": ("from sklearn.ensemble import ExtraTreesClassifier\n",
               "ExtraTreesClassifier(n_estimators=100, min_samples_leaf=2, random_state=0)",
               "extra trees"),
    "other": ("from sklearn.linear_model import LogisticRegression\n",
              "LogisticRegression(C=1.0, max_iter=2000)", "logistic regression"),
}
# The family's size and regularization (`generic_code.FAMILIES` reads them when `make` is
# called): 100 trees, 100 boosting rounds, 32 hidden units, C = 1, leaves of 4 words.
CAPACITY, REGULARIZATION = 2, 3


def render(combo: Combo) -> tuple[str, str, str]:
    """(code, model phrase, second) of `combo` for the span task. The model is the
    task-generic programs' family paragraph (`generic_code.FAMILIES`: its comment, its
    imports and `make`, the paragraph the corpus repeats on every table, text and picture
    task), so the family is one decision whose import and constructor cannot disagree;
    `second` names the ensemble's second model for the plan."""
    if combo.model.name not in FAMILIES or combo.model.name == "svm":
        raise ValueError(f"The span skeleton has no {combo.model.name!r} model.")
    phrase, family = FAMILIES[combo.model.name]
    second = ""
    feats = CONTEXT if combo.data.name == "context" else SHAPE
    build = "model = make(len(X_tr))\n"
    if combo.learning.name == "early_stopping":
        build += "model.set_params(early_stopping=True)\n"
    fit = build + "model.fit(X_tr, y_tr)\np_va = model.predict_proba(X_va)[:, 1]\n"
    refit = "model.fit(X, y)\npred = model.predict_proba(X_test)[:, 1]\n"
    if combo.learning.name == "ensemble":
        second_imp, second_ctor, second = SECOND.get(combo.model.name, SECOND["other"])
        fit = (build + second_imp + f"models = [model, {second_ctor}]\n"
               "p_va = np.mean([m.fit(X_tr, y_tr).predict_proba(X_va)[:, 1] for m in models], "
               "axis=0)\n")
        refit = ("pred = np.mean([m.fit(X, y).predict_proba(X_test)[:, 1] for m in models], "
                 "axis=0)\n")
    elif combo.learning.name not in ("holdout", "early_stopping"):
        raise ValueError(f"The span skeleton has no {combo.learning.name!r} learning idea.")
    code = ("import re\nimport numpy as np\nimport pandas as pd\n\n"
            'train = pd.read_csv("input/train.csv")\ntest = pd.read_csv("input/test.csv")\n'
            'kind = "proba"\n\n'
            + family + "\n" + f"capacity = {CAPACITY}\n\nregularization = {REGULARIZATION}\n\n"
            + ENTRY + feats + TABLE +
            "n_va = len(train) // 5\nvalid, fitting = train[:n_va], train[n_va:]\n"
            "X_tr, y_tr, _ = table(fitting, True)\nX_va, _, g_va = table(valid, True)\n"
            "X, y, _ = table(train, True)\nX_test, _, g_test = table(test, False)\n\n"
            + fit + "found = extract(valid, p_va, g_va)\n"
            "print(\"validation Jaccard:\", np.mean([jaccard(a, b) for a, b in "
            "zip(found, valid[\"selected_text\"])]))\n" + refit + "\n"
            'sub = pd.DataFrame({"id": test["id"], "selected_text": extract(test, pred, g_test)})\n'
            'sub.to_csv("submission.csv", index=False)\nprint("wrote", sub.shape)\n')
    return code, phrase, second
