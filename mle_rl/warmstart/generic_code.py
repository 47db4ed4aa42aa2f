"""The text of the task-generic tabular programs (`generic.py` composes them).

HEADER reads the files (train and test as CSV or JSON; the sample submission under any of
the names competitions give it; no test file: the sample's ids) and works out the task (the
id column, the targets: the sample's columns that the test lacks, one-hot targets as classes,
the output kind, free-text
columns: strings of 1.5 words or more on average with many distinct values, joined into
`docs` and replaced by their lengths and, for each pair of them, the overlap of their
words; a span task, whose target is a piece of a text column in most rows, as one row per
word of that text with whether it lies inside the piece as the target, the word's place,
length and smoothed rate of lying inside (alone and with the row's other columns), and the
submission joining the words kept from the first to the last; pictures, see
`generic_image_code.py`), then
defines fit / predict / score / submission, which read the decisions (`metric`,
`log_target`, the family's `make` and `fit_rows`, `capacity`, `regularization`) when they
are called, after every paragraph has run. Each table maps a decision's value to (the
plan's phrase, its paragraph); no paragraph has a blank line inside, so with the warm
start's paragraph pre-tokens each is one token.
"""

HEADER = '''\
import glob
import os
import zipfile
import numpy as np
import pandas as pd
from sklearn.metrics import log_loss, roc_auc_score
from sklearn.multioutput import MultiOutputRegressor
for a in sorted(glob.glob("input/*.zip") + glob.glob("input/*.7z")):
    d = os.path.join("unpacked", os.path.basename(a).split(".")[0])
    if not os.path.isdir(d):
        if a.endswith(".zip"):
            zipfile.ZipFile(a).extractall(d)
        else:
            import py7zr
            with py7zr.SevenZipFile(a) as z:
                z.extractall(d)
files = sorted(glob.glob("input/**/*", recursive=True) + glob.glob("unpacked/**/*", recursive=True), key=lambda f: (f.count("/"), f))
def read(name):
    f = next((f for f in files if os.path.basename(f) in (f"{name}.csv", f"{name}.json")), None)
    return None if f is None else pd.read_csv(f) if f.endswith(".csv") else pd.read_json(f)
sample = pd.read_csv(next(f for f in files if os.path.basename(f).startswith("sample") and "ubmission" in os.path.basename(f) and f.endswith(".csv")))
test = read("test")
test = sample[sample.columns[:1]] if test is None else test
cols = [c for c in sample.columns if c not in test.columns] or list(sample.columns[1:])
ID = next((c for c in sample.columns if c in test.columns), sample.columns[0])
pictures = {}
for f in files:
    if f.lower().endswith((".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif")):
        for k in (os.path.basename(f), os.path.splitext(os.path.basename(f))[0]):
            pictures.setdefault(k, []).append(f)
train = read("train")
if train is None:
    named = sorted({os.path.basename(f) for v in pictures.values() for f in v if "train" in f.lower() and "clean" not in f.lower()})
    labels = [n.split(".")[0].split("_")[0] for n in named]
    if 2 <= len(set(labels)) <= max(2, len(named) // 5):
        train = pd.DataFrame({ID: named, cols[0]: labels})
target = [c for c in train.columns if c not in test.columns and c != ID]
if set(cols) <= set(target):
    target = cols
span_of, rows_test = None, test
if len(target) == 1 and not pd.api.types.is_numeric_dtype(train[target[0]]):
    for c in [c for c in train.columns if c in test.columns and c != ID and not pd.api.types.is_numeric_dtype(train[c])]:
        a, b = train[c].fillna("").astype(str), train[target[0]].fillna("").astype(str)
        if b.nunique() > 0.3 * len(b) and np.mean([v in u for u, v in zip(a, b)]) > 0.9 and np.mean(b.str.len() < a.str.len()) > 0.3:
            span_of = c
            break
if span_of is not None:
    import re
    train = train.sample(min(len(train), 3000), random_state=0).reset_index(drop=True)
    other = [c for c in train.columns if c in test.columns and c not in (ID, span_of)]
    def words_of(df, inside_of=None):
        out = []
        for r in range(len(df)):
            text = str(df[span_of].iloc[r]) if df[span_of].iloc[r] == df[span_of].iloc[r] else ""
            found = list(re.finditer(r"\\S+", text))
            lo, hi = -1, -1
            if inside_of is not None:
                part = str(df[inside_of].iloc[r]).strip()
                lo = text.find(part) if part else -1
                hi = lo + len(part)
            for k, m in enumerate(found):
                w = m.group().lower()
                out.append({"_row": r, "_word": w, "_pos": k / max(1, len(found) - 1), "_first": k == 0, "_last": k == len(found) - 1, "_n": len(found), "_len": len(w), "_alpha": w.isalpha(), **{c: df[c].iloc[r] for c in other}, "_in": int(lo >= 0 and m.start() < hi and m.end() > lo)})
        return pd.DataFrame(out)
    train, test = words_of(train, target[0]), words_of(test).drop(columns=["_in"])
    key = lambda df: df["_word"] + "|" + df[other].astype(str).agg("|".join, axis=1) if other else df["_word"]
    for name, k_tr, k_te in (("_rate", train["_word"], test["_word"]), ("_rate_ctx", key(train), key(test))):
        n, hit, prior = k_tr.map(k_tr.value_counts()), train.groupby(k_tr)["_in"].transform("sum"), train["_in"].mean()
        train[name] = (hit - train["_in"] + 5 * prior) / (n - 1 + 5)
        stats = train.groupby(k_tr)["_in"].agg(["sum", "count"])
        test[name] = ((k_te.map(stats["sum"]).fillna(0) + 5 * prior) / (k_te.map(stats["count"]).fillna(0) + 5)).to_numpy()
    train, test = train.drop(columns=["_word"]), test.drop(columns=["_word"])
    ID, target = "_row", ["_in"]
if len(train) > 8000 and span_of is None:
    train = train.sample(8000, random_state=0).reset_index(drop=True)
onehot = len(target) > 1 and bool(train[target].isin([0, 1]).all().all()) and bool((train[target].sum(axis=1) == 1).all())
y0 = train[target].idxmax(axis=1) if onehot else train[target[0]]
in_labels = bool(sample[cols[0]].isin(y0.unique()).all())
if len(cols) > len(target) or onehot:
    kind = "classes"
elif len(target) == 1 and y0.nunique() == 2 and not in_labels:
    kind = "proba"
elif len(target) == 1 and (not pd.api.types.is_numeric_dtype(y0) or (y0.nunique() <= 20 and in_labels and bool((y0 % 1 == 0).all()))):
    kind = "label"
else:
    kind = "regress"
if span_of is not None:
    kind = "proba"
feats = [c for c in train.columns if c in test.columns and c != ID]
both = pd.concat([train[feats], test[feats]], ignore_index=True)
def picture(v, split):
    found = pictures.get(str(v), [])
    return next((f for f in found if split in f.lower()), found[0] if found else None)
img_src, img_col = None, None
for c in [ID] + feats:
    if c in train.columns and c in test.columns:
        src = [picture(v, "train") for v in train[c]] + [picture(v, "test") for v in test[c]]
        if len(src) and sum(f is not None for f in src) >= 0.9 * len(src):
            img_src, img_col = src, c
            break
grids = [c for c in feats if both[c].map(lambda v: isinstance(v, list) and len(v) >= 64 and all(isinstance(u, (int, float)) for u in v[:64])).mean() > 0.9]
if img_src is None and grids:
    img_src, img_col = [[np.asarray(both[c][i], dtype=float) for c in grids] for i in range(len(both))], grids
both = both.drop(columns=[c for c in (grids + [img_col] if isinstance(img_col, str) else grids) if c in both.columns])
def image(i, size):
    from PIL import Image
    src = img_src[i]
    if src is None:
        return np.zeros((size, size, 3), np.float32)
    if isinstance(src, str):
        with Image.open(src) as im:
            return np.asarray(im.convert("RGB").resize((size, size)), np.float32) / 255.0
    out = []
    for band in src:
        side = int(np.sqrt(band.size))
        g = np.nan_to_num(band[:side * side].reshape(side, side))
        g = (g - g.min()) / (g.max() - g.min() + 1e-9)
        out.append(np.asarray(Image.fromarray(g.astype(np.float32), mode="F").resize((size, size))))
    return np.stack(out, axis=2)
text_cols, docs, bags, raws = [], None, {}, {}
for c in list(both.columns):
    if not pd.api.types.is_numeric_dtype(both[c]):
        both[c] = both[c].map(lambda v: str(v) if isinstance(v, (list, dict)) else v)
        s = both[c].astype(str)
        words = s.str.split().str.len()
        if s.nunique() > 30 and words.mean() >= 1.5:
            text_cols.append(c)
            s = both[c].fillna("").astype(str)
            docs = s if docs is None else docs + " | " + s
            bags[c], raws[c] = s.str.lower().str.split().map(set), s.str.lower()
            both[f"{c}_chars"], both[f"{c}_words"] = np.log1p(s.str.len()), np.log1p(words)
            both = both.drop(columns=[c])
        elif s.nunique() > 30:
            n = s.str.len()
            if n.nunique() == 1 and n.iloc[0] <= 12:
                for i in range(n.iloc[0]):
                    both[f"{c}_{i}"] = s.str[i].map(ord)
            both[c] = s.map(s.value_counts()) / len(s)
for i, a in enumerate(text_cols[:4]):
    for b in text_cols[i + 1:4]:
        from sklearn.feature_extraction.text import TfidfVectorizer
        both[f"{a}_{b}_overlap"] = [len(u & v) / max(1, len(u | v)) for u, v in zip(bags[a], bags[b])]
        grams = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), max_features=50000).fit(pd.concat([raws[a], raws[b]]))
        both[f"{a}_{b}_cosine"] = np.asarray(grams.transform(raws[a]).multiply(grams.transform(raws[b])).sum(axis=1)).ravel()
        both[f"{a}_{b}_len_diff"] = both[f"{a}_chars"] - both[f"{b}_chars"]
both = pd.get_dummies(both, dtype=float) if both.shape[1] else both
X = np.array(both[:len(train)], dtype=float)
X_test = np.array(both[len(train):], dtype=float)
X[~np.isfinite(X)], X_test[~np.isfinite(X_test)] = np.nan, np.nan
if kind == "regress":
    y = train[target].to_numpy(dtype=float)
    use_log = lambda: log_target and y.min() > -1
    center = lambda t: np.log1p(t) if use_log() else t
    moments = lambda: (center(y).mean(0), center(y).std(0) + 1e-12)
else:
    y = y0.to_numpy()
    classes = np.unique(y)
if X.shape[1] == 0:
    X, X_test = np.zeros((len(X), 1)), np.zeros((len(X_test), 1))
print("task:", kind, "targets:", target, "text:", text_cols, "images:", 0 if img_src is None else sum(v is not None for v in img_src), "train:", X.shape, "test:", X_test.shape)
def fit(A, t):
    if len(A) > fit_rows:
        keep = np.random.default_rng(0).choice(len(A), fit_rows, replace=False)
        A, t = A[keep], t[keep]
    model = make(len(A))
    if kind != "regress":
        return model.fit(A, t)
    mu, sd = moments()
    t = (center(t) - mu) / sd
    if t.shape[1] > 1:
        return MultiOutputRegressor(model).fit(A, t)
    return model.fit(A, t[:, 0])
def predict(model, A):
    if kind == "regress":
        mu, sd = moments()
        p = model.predict(A).reshape(len(A), -1) * sd + mu
        return np.expm1(p) if use_log() else p
    p = np.zeros((len(A), len(classes)))
    p[:, np.searchsorted(classes, model.classes_)] = model.predict_proba(A)
    return p
def score(t, p):
    try:
        if kind == "regress":
            if metric == "mae":
                return float(np.mean(np.abs(t - p)))
            if metric in ("rmsle_column_mean", "rmsle"):
                d = np.log1p(np.clip(p, 0, None)) - np.log1p(np.clip(t, 0, None))
                return float(np.mean(np.sqrt(np.mean(d ** 2, axis=0))))
            return float(np.mean(np.sqrt(np.mean((t - p) ** 2, axis=0))))
        if metric == "auc" and kind == "proba":
            return float(roc_auc_score(t == classes[-1], p[:, -1]))
        if metric == "accuracy" or kind == "label":
            return float(np.mean(classes[p.argmax(1)] == t))
        return float(log_loss(t, p, labels=classes))
    except ValueError:
        return float("nan")
def submission(p):
    if span_of is not None:
        texts = []
        for r in range(len(rows_test)):
            text = str(rows_test[span_of].iloc[r]) if rows_test[span_of].iloc[r] == rows_test[span_of].iloc[r] else ""
            found, q = text.split(), p[(test["_row"] == r).to_numpy(), -1]
            on = np.flatnonzero(q > 0.5) if len(q) else []
            lo, hi = (on[0], on[-1]) if len(on) else (int(np.argmax(q)), int(np.argmax(q))) if len(q) else (0, -1)
            texts.append(" ".join(found[lo:hi + 1]))
        sub = rows_test[[c for c in sample.columns if c in rows_test.columns]].copy()
        sub[cols[0]] = texts
        return sub[list(sample.columns)]
    sub = test[[c for c in sample.columns if c in test.columns]].copy()
    if kind == "regress":
        p = np.clip(p, y.min(0), y.max(0))
        for k, c in enumerate(target):
            sub[c] = p[:, k]
    elif kind == "label":
        sub[cols[0]] = classes[p.argmax(1)]
    elif kind == "proba":
        sub[cols[0]] = np.clip(p[:, -1], 0, 1)
    else:
        q = pd.DataFrame(p, columns=[str(c) for c in classes]).reindex(columns=cols, fill_value=0.0)
        q = np.clip(q.to_numpy(dtype=float), 1e-6, 1)
        sub[cols] = q / q.sum(1, keepdims=True)
    return sub[list(sample.columns)]
'''

# family -> (phrase, code). Each says its family (a comment the statistics read) and defines
# make(n) -> an unfitted estimator for n rows (a
# classifier, or a regressor when kind == "regress") from `capacity` and `regularization`,
# and fit_rows, the most rows it is fitted on (slow families fit on a random subset).
FAMILIES = {
    "linear": ("a linear model (logistic or ridge regression; squared features at high "
               "capacity)", '''\
# model family: linear
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import PolynomialFeatures
fit_rows = 20000
def make(n):
    if kind == "regress":
        model = Ridge(alpha=[0.01, 0.1, 1.0, 10.0, 100.0][regularization - 1])
    else:
        model = LogisticRegression(C=[100.0, 10.0, 1.0, 0.1, 0.01][regularization - 1], max_iter=3000)
    if capacity >= 4 and X.shape[1] <= 40:
        model = make_pipeline(PolynomialFeatures(2, interaction_only=capacity == 4), model)
    return model
'''),
    "knn": ("k-nearest neighbours", '''\
# model family: knn
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
fit_rows = 20000
def make(n):
    Model = KNeighborsRegressor if kind == "regress" else KNeighborsClassifier
    k = min([50, 30, 15, 7, 3][capacity - 1], n - 1)
    model = Model(n_neighbors=k, weights="distance" if regularization <= 2 else "uniform")
    return model
'''),
    "naive_bayes": ("naive Bayes (Bayesian ridge for numeric targets)", '''\
# model family: naive_bayes
from sklearn.linear_model import BayesianRidge
from sklearn.naive_bayes import GaussianNB
fit_rows = 20000
def make(n):
    if kind == "regress":
        model = BayesianRidge()
    else:
        model = GaussianNB(var_smoothing=[1e-9, 1e-7, 1e-5, 1e-3, 1e-1][regularization - 1])
    return model
'''),
    "svm": ("a support vector machine with an RBF kernel", '''\
# model family: svm
from sklearn.svm import SVC, SVR
fit_rows = 3000
def make(n):
    gamma = [4.0, 2.0, 1.0, 0.5, 0.25][regularization - 1] / X.shape[1]
    if kind == "regress":
        model = SVR(C=[0.3, 1.0, 3.0, 10.0, 30.0][capacity - 1], gamma=gamma)
    else:
        model = SVC(C=[0.1, 0.3, 1.0, 3.0, 10.0][capacity - 1], gamma=gamma, probability=True, random_state=0)
    return model
'''),
    "random_forest": ("a random forest", '''\
# model family: random_forest
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
fit_rows = 20000
def make(n):
    Model = RandomForestRegressor if kind == "regress" else RandomForestClassifier
    model = Model(n_estimators=[50, 100, 200, 300, 400][capacity - 1], min_samples_leaf=[1, 2, 4, 8, 16][regularization - 1], max_features=0.5, random_state=0)
    return model
'''),
    "extra_trees": ("extremely randomized trees", '''\
# model family: extra_trees
from sklearn.ensemble import ExtraTreesClassifier, ExtraTreesRegressor
fit_rows = 20000
def make(n):
    Model = ExtraTreesRegressor if kind == "regress" else ExtraTreesClassifier
    model = Model(n_estimators=[50, 100, 200, 300, 400][capacity - 1], min_samples_leaf=[1, 2, 4, 8, 16][regularization - 1], max_features=0.7, random_state=0)
    return model
'''),
    "hist_gb": ("histogram gradient boosting", '''\
# model family: hist_gb
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
fit_rows = 20000
def make(n):
    Model = HistGradientBoostingRegressor if kind == "regress" else HistGradientBoostingClassifier
    model = Model(max_iter=[50, 100, 150, 250, 400][capacity - 1], learning_rate=[0.2, 0.1, 0.08, 0.05, 0.04][capacity - 1], min_samples_leaf=[5, 10, 20, 40, 80][regularization - 1], l2_regularization=[0.0, 0.1, 1.0, 3.0, 10.0][regularization - 1], early_stopping=False, random_state=0)
    return model
'''),
    "mlp": ("a small neural network (MLP)", '''\
# model family: mlp
from sklearn.neural_network import MLPClassifier, MLPRegressor
fit_rows = 20000
def make(n):
    Model = MLPRegressor if kind == "regress" else MLPClassifier
    hidden = [(16,), (32,), (64,), (128,), (128, 64)][capacity - 1]
    model = Model(hidden_layer_sizes=hidden, alpha=[1e-5, 1e-4, 1e-3, 1e-2, 1e-1][regularization - 1], max_iter=400, random_state=0)
    return model
'''),
}

# features -> (phrase, code): X, X_test (NaN where missing) -> dense, imputed matrices.
FEATURES = {
    "median_scale": ("impute missing values with the median and standardize", '''\
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
prep = make_pipeline(SimpleImputer(strategy="median", keep_empty_features=True), StandardScaler())
X = prep.fit_transform(X)
X_test = prep.transform(X_test)
'''),
    "quantile": ("impute with the median and map each feature to a normal distribution with "
                 "a quantile transform", '''\
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import QuantileTransformer
prep = make_pipeline(SimpleImputer(strategy="median", keep_empty_features=True), QuantileTransformer(n_quantiles=min(100, len(X)), output_distribution="normal"))
X = prep.fit_transform(X)
X_test = prep.transform(X_test)
'''),
    "rowstats": ("impute, standardize and add row statistics (mean, std, min, max) as "
                 "extra features", '''\
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
prep = make_pipeline(SimpleImputer(strategy="median", keep_empty_features=True), StandardScaler())
X = prep.fit_transform(X)
X_test = prep.transform(X_test)
rowstats = lambda A: np.hstack([A, A.mean(1, keepdims=True), A.std(1, keepdims=True), A.min(1, keepdims=True), A.max(1, keepdims=True)])
X, X_test = rowstats(X), rowstats(X_test)
'''),
    "signed_log": ("impute and apply a signed log transform to tame skewed features, then "
                   "standardize", '''\
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
signed_log = FunctionTransformer(lambda A: np.sign(A) * np.log1p(np.abs(A)))
prep = make_pipeline(SimpleImputer(strategy="median", keep_empty_features=True), signed_log, StandardScaler())
X = prep.fit_transform(X)
X_test = prep.transform(X_test)
'''),
    "pca": ("impute, standardize and keep the principal components that explain 95% of the "
            "variance", '''\
from sklearn.decomposition import PCA
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
prep = make_pipeline(SimpleImputer(strategy="median", keep_empty_features=True), StandardScaler(), PCA(n_components=0.95, random_state=0))
X = prep.fit_transform(X)
X_test = prep.transform(X_test)
'''),
    "missing_flags": ("impute with the median, add a flag per column with missing values, "
                      "and standardize", '''\
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
prep = make_pipeline(SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True), StandardScaler())
X = prep.fit_transform(X)
X_test = prep.transform(X_test)
'''),
}

# validation -> (phrase, code): leaves the test predictions in `pred`.
VALIDATION = {
    "holdout": ("validate on a 20% hold-out split, then refit on all the data", '''\
from sklearn.model_selection import train_test_split
counts = np.unique(y, return_counts=True)[1] if kind != "regress" else [0]
strat = y if kind != "regress" and min(counts) >= 2 else None
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=0, stratify=strat)
model = fit(X_tr, y_tr)
val_score = score(y_va, predict(model, X_va))
print("validation", metric, val_score)
model = fit(X, y)
pred = predict(model, X_test)
'''),
    "kfold3": ("3-fold cross-validation, averaging the fold models' test predictions", '''\
from sklearn.model_selection import KFold, StratifiedKFold
counts = np.unique(y, return_counts=True)[1] if kind != "regress" else [0]
folds = StratifiedKFold if kind != "regress" and min(counts) >= 3 else KFold
scores, pred = [], 0
for tr, va in folds(n_splits=3, shuffle=True, random_state=0).split(X, y if kind != "regress" else None):
    model = fit(X[tr], y[tr])
    scores.append(score(y[va], predict(model, X[va])))
    pred = pred + predict(model, X_test) / 3
cv_score = np.nanmean(scores)
print("cross-validated", metric, cv_score)
'''),
    "kfold5": ("5-fold cross-validation, averaging the fold models' test predictions", '''\
from sklearn.model_selection import KFold, StratifiedKFold
counts = np.unique(y, return_counts=True)[1] if kind != "regress" else [0]
folds = StratifiedKFold if kind != "regress" and min(counts) >= 5 else KFold
scores, pred = [], 0
for tr, va in folds(n_splits=5, shuffle=True, random_state=0).split(X, y if kind != "regress" else None):
    model = fit(X[tr], y[tr])
    scores.append(score(y[va], predict(model, X[va])))
    pred = pred + predict(model, X_test) / 5
cv_score = np.nanmean(scores)
print("cross-validated", metric, cv_score)
'''),
}

WRITER = '''\
sub = submission(pred)
sub.to_csv("submission.csv", index=False)
print("wrote submission.csv", sub.shape)
'''
