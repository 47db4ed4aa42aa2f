"""The generic programs' first paragraph, HEADER: it reads the task's files and works out
the task (`generic.py` composes the programs; the decisions are in `generic_code.py`,
`generic_text_code.py` and `generic_image_code.py`).

HEADER reads the files (train and test as CSV or JSON, in the task's folder or in its .zip
/ .7z archives, which it unpacks into its own directory; the sample submission under any of
the names competitions give it; no test file: the sample's ids; no train table: the
pictures of a `train` folder labelled by their names) and works out the task (the id
column, the targets: the sample's columns that the test lacks, one-hot targets as classes,
the output kind, free-text columns: strings of 1.5 words or more on average with many
distinct values, joined into `docs` and replaced by their lengths and, for each pair of
them, the overlap of their words, the cosine of their character n-gram TF-IDF and their
length difference; a span task, whose target is a piece of a text column in most rows, as
one row per word of that text with whether it lies inside the piece as the target, the
word's place, length and smoothed rate of lying inside (alone and with the row's other
columns), the submission joining the words kept from the first to the last; pictures, see
`generic_image_code.py`; noisy pictures beside cleaned ones, as denoising competitions
give them, as one row per pixel: its 3 x 3 neighbourhood and place, the cleaned pixel the
target, the sample's `<image>_<row>_<col>` ids), then defines fit / predict / score /
submission, which read the
decisions (`metric`, `log_target`, the family's `make` and `fit_rows`, `capacity`,
`regularization`) when they are called, after every paragraph has run. It has no blank
line inside, so with the warm start's paragraph pre-tokens it is one token.
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
    if not os.path.isdir(d) and not os.path.isdir(os.path.join("input", os.path.basename(d))):
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
cleaned = {os.path.basename(f): f for v in pictures.values() for f in v if "train" in f.lower() and "clean" in f.lower()}
if train is None and cleaned:
    from PIL import Image
    def pixels(path, target_path=None):
        g = np.asarray(Image.open(path).convert("L"), np.float32) / 255.0
        h, w = g.shape
        pad = np.pad(g, 1, mode="edge")
        out = {f"p{i}{j}": pad[i:i + h, j:j + w].ravel() for i in range(3) for j in range(3)}
        rr, cc = np.mgrid[0:h, 0:w]
        out.update(row=(rr / h).ravel(), col=(cc / w).ravel())
        out[ID] = [f"{os.path.splitext(os.path.basename(path))[0]}_{r + 1}_{c + 1}" for r, c in zip(rr.ravel(), cc.ravel())]
        if target_path is not None:
            out[cols[0]] = (np.asarray(Image.open(target_path).convert("L"), np.float32) / 255.0).ravel()
        return pd.DataFrame(out)
    noisy = sorted({f for v in pictures.values() for f in v if "train" in f.lower() and "clean" not in f.lower() and os.path.basename(f) in cleaned})
    train = pd.concat([pixels(f, cleaned[os.path.basename(f)]).sample(frac=1.0, random_state=0).head(max(1, 8000 // max(1, len(noisy)))) for f in noisy], ignore_index=True)
    wanted = set(test[ID].astype(str))
    shown = {}
    for v in pictures.values():
        for f in v:
            if "test" in f.lower():
                shown.setdefault(os.path.basename(f), f)
    test = pd.concat([pixels(f) for _, f in sorted(shown.items())], ignore_index=True)
    test = test[test[ID].isin(wanted)].reset_index(drop=True)
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
