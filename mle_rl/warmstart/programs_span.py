"""The span-extraction skeleton (docstring-param-span): find the parameter's entry in the
flattened Parameters section, then a classifier scores each word of the entry as "the
description starts here"; the answer is the entry from the best-scored word on.

Data ideas: the word's own shape, or its shape and its neighbours'. Model ideas: the same
families as elsewhere (a binary classifier). Learning ideas: hold-out, early stopping,
an average with a second model.
"""

from __future__ import annotations

from mle_rl.warmstart.action_pool import Combo

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

CLASSIFIERS = {
    "linear": ("from sklearn.linear_model import LogisticRegression\n",
               "LogisticRegression(C=1.0, max_iter=2000)"),
    "knn": ("from sklearn.neighbors import KNeighborsClassifier\n",
            "KNeighborsClassifier(n_neighbors=25)"),
    "naive_bayes": ("from sklearn.naive_bayes import GaussianNB\n", "GaussianNB()"),
    "random_forest": ("from sklearn.ensemble import RandomForestClassifier\n",
                      "RandomForestClassifier(n_estimators=100, min_samples_leaf=2, "
                      "random_state=0)"),
    "extra_trees": ("from sklearn.ensemble import ExtraTreesClassifier\n",
                    "ExtraTreesClassifier(n_estimators=100, min_samples_leaf=2, random_state=0)"),
    "hist_gb": ("from sklearn.ensemble import HistGradientBoostingClassifier\n",
                "HistGradientBoostingClassifier(max_iter=100)"),
    "mlp": ("from sklearn.neural_network import MLPClassifier\n",
            "MLPClassifier(hidden_layer_sizes=(32,), max_iter=300, random_state=0)"),
}


def render(combo: Combo) -> tuple[str, str]:
    """(code, second) of `combo` for the span task (blocks as in `programs`: each imports
    what it uses at its top); `second` names the ensemble's second model for the plan."""
    if combo.model.name not in CLASSIFIERS:
        raise ValueError(f"The span skeleton has no {combo.model.name!r} model.")
    imp, ctor = CLASSIFIERS[combo.model.name]
    if combo.learning.name == "early_stopping":
        ctor = ctor[:-1] + ", early_stopping=True)"
    phrase = ""
    feats = CONTEXT if combo.data.name == "context" else SHAPE
    fit = "model.fit(X_tr, y_tr)\np_va = model.predict_proba(X_va)[:, 1]\n"
    refit = "model.fit(X, y)\npred = model.predict_proba(X_test)[:, 1]\n"
    if combo.learning.name == "ensemble":
        other = "extra_trees" if combo.model.name == "linear" else "linear"
        phrase = "extra trees" if other == "extra_trees" else "logistic regression"
        second_imp, second = CLASSIFIERS[other]
        fit = (second_imp + f"models = [model, {second}]\n"
               "p_va = np.mean([m.fit(X_tr, y_tr).predict_proba(X_va)[:, 1] for m in models], "
               "axis=0)\n")
        refit = ("pred = np.mean([m.fit(X, y).predict_proba(X_test)[:, 1] for m in models], "
                 "axis=0)\n")
    elif combo.learning.name not in ("holdout", "early_stopping"):
        raise ValueError(f"The span skeleton has no {combo.learning.name!r} learning idea.")
    code = ("import re\nimport numpy as np\nimport pandas as pd\n\n"
            'train = pd.read_csv("input/train.csv")\ntest = pd.read_csv("input/test.csv")\n\n'
            + imp + f"model = {ctor}\n\n" + ENTRY + feats + TABLE +
            "n_va = len(train) // 5\nvalid, fit_rows = train[:n_va], train[n_va:]\n"
            "X_tr, y_tr, _ = table(fit_rows, True)\nX_va, _, g_va = table(valid, True)\n"
            "X, y, _ = table(train, True)\nX_test, _, g_test = table(test, False)\n\n"
            + fit + "found = extract(valid, p_va, g_va)\n"
            "print(\"validation Jaccard:\", np.mean([jaccard(a, b) for a, b in "
            "zip(found, valid[\"selected_text\"])]))\n" + refit + "\n"
            'sub = pd.DataFrame({"id": test["id"], "selected_text": extract(test, pred, g_test)})\n'
            'sub.to_csv("submission.csv", index=False)\nprint("wrote", sub.shape)\n')
    return code, phrase
