"""Programs for the built-in tasks that are not tables (images, text, spans), from
action-pool combinations: `render(task_id, combo) -> (plan, code)`. Tables, any table,
get the task-generic programs of `generic.py`.

A program is a sequence of blank-line-separated blocks: numpy/pandas, the task's loading
block, the model, the data idea, the metric
helpers, the learning idea, and the task's submission block. Each block imports what it
uses at its top, and the model block also names its small search grid (`grid`), so every
dependency is local: a block depends only on the task and the blocks just before it. Any
choice of one block per slot is a valid program, and a small policy learns the corpus as
"one block per slot" rather than as long-range agreements between a header of imports and
code far below. The plan names the three ideas, a paragraph each, in the order of the code.
The span task (docstring parameter spans) has its own skeleton (`programs_span.py`): a
per-word "description starts here" classifier whose model block is a task-generic family
paragraph verbatim (`generic_code.FAMILIES`); its plan is written here, as every plan.
"""

from __future__ import annotations

import dataclasses

from mle_rl.warmstart import programs_span
from mle_rl.warmstart.action_pool import Combo


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    """What a program needs to know of a task. kind: binary | multiclass | span; targets:
    target column(s) of train.csv (for reference: programs find them from the data, as the
    train columns that test lacks)."""

    modality: str
    kind: str
    targets: tuple
    skip: tuple = ()         # (data, model, learning) patterns too slow here; "*" = any


# The built-in tasks that are not tables; every tabular task (built-in, generated or a
# user's) gets the task-generic programs of `generic.py`.
TASK_INFO = {
    "digit-images": TaskInfo("image", "multiclass", ("label",),
                             skip=(("pixels", "hist_gb", "*"), ("*", "hist_gb", "grid"))),
    "docstring-authorship": TaskInfo("text", "multiclass", ("library",),
                                     skip=(("*", "hist_gb", "grid"),
                                           ("*", "random_forest", "grid"))),
    "docstring-param-span": TaskInfo("span", "binary", ("selected_text",)),
}

KIND_FUNCS = {
    "binary": ("from sklearn.metrics import roc_auc_score\n",
               "def predict(m, X):\n    return m.predict_proba(X)[:, 1]\n",
               "def score(y, p):\n    return roc_auc_score(y, p)\n", "AUC", "roc_auc"),
    "multiclass": ("from sklearn.metrics import log_loss\n",
                   "def predict(m, X):\n    return m.predict_proba(X)\n",
                   "def score(y, p):\n    return log_loss(y, p, labels=model.classes_)\n",
                   "log loss", "neg_log_loss"),
}

# family -> (import, classifier constructor, grid param, grid values)
MODEL_CODE = {
    "linear": ("from sklearn.linear_model import LogisticRegression\n",
               "LogisticRegression(C=1.0, max_iter=2000)", "C", "[0.1, 1.0, 10.0]"),
    "knn": ("from sklearn.neighbors import KNeighborsClassifier\n",
            "KNeighborsClassifier(n_neighbors=15, weights=\"distance\")", "n_neighbors",
            "[5, 15, 30]"),
    "naive_bayes": ("from sklearn.naive_bayes import GaussianNB\n", "GaussianNB()",
                    "var_smoothing", "[1e-9, 1e-6, 1e-3]"),
    "svm": ("from sklearn.svm import SVC\n", "SVC(C=1.0, probability=True, random_state=0)",
            "C", "[0.3, 1.0, 3.0]"),
    "random_forest": ("from sklearn.ensemble import RandomForestClassifier\n",
                      "RandomForestClassifier(n_estimators=100, random_state=0)",
                      "min_samples_leaf", "[1, 5]"),
    "extra_trees": ("from sklearn.ensemble import ExtraTreesClassifier\n",
                    "ExtraTreesClassifier(n_estimators=100, random_state=0)",
                    "min_samples_leaf", "[1, 5]"),
    "hist_gb": ("from sklearn.ensemble import HistGradientBoostingClassifier\n",
                "HistGradientBoostingClassifier(max_iter=60, learning_rate=0.1)",
                "learning_rate", "[0.05, 0.1]"),
    "mlp": ("from sklearn.neural_network import MLPClassifier\n",
            "MLPClassifier(hidden_layer_sizes=(64,), max_iter=300, random_state=0)",
            "alpha", "[1e-4, 1e-2]"),
}
TEXT_NB = ("from sklearn.naive_bayes import MultinomialNB\n", "MultinomialNB(alpha=0.1)",
           "alpha", "[0.03, 0.1, 0.3]")

DATA_CODE = {
    "word_tfidf": ("from sklearn.feature_extraction.text import TfidfVectorizer\n",
                   "vec = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)\n"
                   "X = vec.fit_transform(train[\"text\"])\nX_test = vec.transform(test[\"text\"])\n"),
    "char_tfidf": ("from sklearn.feature_extraction.text import TfidfVectorizer\n",
                   "vec = TfidfVectorizer(analyzer=\"char_wb\", ngram_range=(2, 4), min_df=3, "
                   "sublinear_tf=True)\n"
                   "X = vec.fit_transform(train[\"text\"])\nX_test = vec.transform(test[\"text\"])\n"),
    "word_char_tfidf": ("from scipy.sparse import hstack\n"
                        "from sklearn.feature_extraction.text import TfidfVectorizer\n",
                        "words = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)\n"
                        "chars = TfidfVectorizer(analyzer=\"char_wb\", ngram_range=(2, 4), "
                        "min_df=3, sublinear_tf=True)\n"
                        "X = hstack([words.fit_transform(train[\"text\"]), "
                        "chars.fit_transform(train[\"text\"])]).tocsr()\n"
                        "X_test = hstack([words.transform(test[\"text\"]), "
                        "chars.transform(test[\"text\"])]).tocsr()\n"),
    "pixels": ("from sklearn.preprocessing import StandardScaler\n",
               "prep = StandardScaler()\nX = prep.fit_transform(X)\nX_test = prep.transform(X_test)\n"),
    "pixel_pca": ("from sklearn.decomposition import PCA\n",
                  "prep = PCA(n_components=40, whiten=True, random_state=0)\n"
                  "X = prep.fit_transform(X)\nX_test = prep.transform(X_test)\n"),
    "downsample": ("",
                   "def pool(A):\n"
                   "    img = A.reshape(-1, 32, 32)\n"
                   "    small = img.reshape(-1, 8, 4, 8, 4).mean(axis=(2, 4)).reshape(len(A), -1)\n"
                   "    return np.hstack([small, img.mean(1), img.mean(2)])\n"
                   "X, X_test = pool(X), pool(X_test)\n"),
}


def _load_block(info: TaskInfo) -> str:
    """Reads the data; the targets are the train columns that test lacks."""
    head = ('train = pd.read_csv("input/train.csv")\n'
            'test = pd.read_csv("input/test.csv")\n'
            "target = [c for c in train.columns if c not in test.columns]\n"
            "y = train[target[0]].to_numpy()\n")
    if info.modality == "image":
        return (head + "def load(ids):\n"
                "    return np.stack([np.asarray(Image.open(f\"input/images/{i}.png\"), "
                "dtype=float).ravel() / 255 for i in ids])\n"
                "X, X_test = load(train[\"id\"]), load(test[\"id\"])\n")
    return head


def skipped(info: TaskInfo, combo: Combo) -> bool:
    """Whether `combo` matches one of the task's too-slow patterns."""
    names = (combo.data.name, combo.model.name, combo.learning.name)
    return any(all(p in ("*", n) for p, n in zip(pat, names)) for pat in info.skip)


def _model_ctor(info: TaskInfo, combo: Combo) -> tuple[str, str, str, str]:
    """(import, constructor, grid param, grid values)."""
    if combo.model.name == "naive_bayes" and info.modality == "text":
        imp, ctor, param, vals = TEXT_NB
    else:
        imp, ctor, param, vals = MODEL_CODE[combo.model.name]
    if combo.learning.name == "early_stopping":
        ctor = ctor[:-1] + (", early_stopping=True, validation_fraction=0.1)"
                            if combo.model.name == "mlp" else
                            ", early_stopping=True, validation_fraction=0.1, n_iter_no_change=10)")
        ctor = ctor.replace("max_iter=60", "max_iter=300").replace("max_iter=300)",
                                                                   "max_iter=1000)")
    return imp, ctor, param, vals


def _second_model(combo: Combo) -> tuple[str, str, str]:
    """(import, constructor, phrase) of the ensemble's second model."""
    if combo.model.name == "linear":
        return ("from sklearn.ensemble import ExtraTreesClassifier\n",
                "ExtraTreesClassifier(n_estimators=100, random_state=0)", "extra trees")
    return ("from sklearn.linear_model import LogisticRegression\n",
            "LogisticRegression(C=1.0, max_iter=2000)", "logistic regression")


def _learning_block(info: TaskInfo, combo: Combo) -> str:
    """The learning idea, its imports first; leaves `model` and test predictions `pred`."""
    name = combo.learning.name
    split = ("X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, "
             "random_state=0, stratify=y)\n")
    what = KIND_FUNCS[info.kind][3]
    if name in ("holdout", "early_stopping"):
        return ("from sklearn.model_selection import train_test_split\n"
                + split + "model.fit(X_tr, y_tr)\n"
                f"print(\"validation {what}:\", score(y_va, predict(model, X_va)))\n"
                "model.fit(X, y)\npred = predict(model, X_test)\n")
    if name == "kfold":
        return ("from sklearn.model_selection import StratifiedKFold\n"
                "scores, pred = [], 0\n"
                "for tr, va in StratifiedKFold(n_splits=3, shuffle=True, random_state=0)"
                ".split(X, y):\n"
                "    model.fit(X[tr], y[tr])\n"
                "    scores.append(score(y[va], predict(model, X[va])))\n"
                "    pred = pred + predict(model, X_test) / 3\n"
                f"print(\"cross-validated {what}:\", np.mean(scores))\n")
    if name == "grid":
        scoring = KIND_FUNCS[info.kind][4]
        return ("from sklearn.model_selection import GridSearchCV\n"
                f"search = GridSearchCV(model, grid, cv=3, scoring=\"{scoring}\")\n"
                "search.fit(X, y)\n"
                "print(\"best parameters:\", search.best_params_)\n"
                f"print(\"cross-validated score ({scoring}):\", search.best_score_)\n"
                "model = search.best_estimator_\npred = predict(model, X_test)\n")
    if name == "ensemble":
        imp, ctor, _ = _second_model(combo)
        return ("from sklearn.model_selection import train_test_split\n" + imp +
                f"models = [model, {ctor}]\n" + split +
                "p_va = np.mean([predict(m.fit(X_tr, y_tr), X_va) for m in models], axis=0)\n"
                f"print(\"validation {what}:\", score(y_va, p_va))\n"
                "pred = np.mean([predict(m.fit(X, y), X_test) for m in models], axis=0)\n")
    raise ValueError(f"Unknown learning strategy {name!r}.")


def _write_block(info: TaskInfo) -> str:
    head = 'sub = pd.DataFrame({"id": test["id"]})\n'
    if info.kind == "multiclass":
        body = "sub[[str(c) for c in model.classes_]] = pred\n"
    else:
        body = "sub[target[0]] = pred\n"
    return head + body + 'sub.to_csv("submission.csv", index=False)\nprint("wrote", sub.shape)\n'


def dense_text(info: TaskInfo, combo: Combo) -> bool:
    """Text features go through truncated SVD first for models that need dense input, and
    for the SVM (an RBF SVM with probabilities on raw TF-IDF takes minutes)."""
    return info.modality == "text" and (combo.model.needs_dense or combo.model.name == "svm")


def plan_text(info: TaskInfo, combo: Combo, second: str = "", model: str = "") -> str:
    """The plan: one paragraph per idea (model, features, validation), in the order of the
    code, so plan and code agree; `model`: the model's phrase where the program's own
    differs from the action pool's."""
    if not model:
        model = combo.model.phrase
        if combo.model.name == "linear":
            model = "a linear model (logistic regression)"
        if combo.model.name == "naive_bayes" and info.modality == "text":
            model = "naive Bayes (multinomial)"
    learning = combo.learning.phrase
    if combo.learning.name == "ensemble":
        learning = learning.replace("a second model", second)
    data = combo.data.phrase
    if dense_text(info, combo):
        data += ", reduced to 100 dimensions with truncated SVD"
    return f"Model: {model}.\n\nFeatures: {data}.\n\nValidation: {learning}."


def render(task_id: str, combo: Combo) -> tuple[str, str]:
    """(plan, code) of `combo` for built-in task `task_id`."""
    info = TASK_INFO.get(task_id)
    if info is None:
        raise ValueError(f"No program templates for task {task_id!r}; known: "
                         f"{', '.join(TASK_INFO)}.")
    if info.modality == "span":
        code, model, second = programs_span.render(combo)
        return programs_span.APPROACH + plan_text(info, combo, second, model), code
    data_imp, data_code = DATA_CODE[combo.data.name]
    m_imp, ctor, param, vals = _model_ctor(info, combo)
    metric_imp, pred_fn, score_fn = KIND_FUNCS[info.kind][:3]
    if dense_text(info, combo):
        data_imp += "from sklearn.decomposition import TruncatedSVD\n"
        data_code += ("svd = TruncatedSVD(n_components=100, random_state=0)\n"
                      "X = svd.fit_transform(X)\nX_test = svd.transform(X_test)\n")
    head = "import numpy as np\nimport pandas as pd\n"
    if info.modality == "image":
        head += "from PIL import Image\n"
    blocks = [head, _load_block(info),
              m_imp + f"model = {ctor}\n" + f'grid = {{"{param}": {vals}}}\n',
              data_imp + data_code, metric_imp + pred_fn + score_fn,
              _learning_block(info, combo), _write_block(info)]
    second = _second_model(combo)[2] if combo.learning.name == "ensemble" else ""
    return plan_text(info, combo, second), "\n".join(blocks)
