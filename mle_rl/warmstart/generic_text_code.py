"""The text of the generic programs' text decisions (`generic.py` composes them; the rest of
the program is in `generic_code.py`).

HEADER finds the free-text columns by their content and joins them into `docs` (train rows,
then test rows). TEXT turns `docs` into a matrix `T_all`; TEXT_MODELS fit a linear model of
it whose out-of-fold predictions become columns of X, so that every model family and feature
step of the tabular grammar works on text, alone or beside numbers and categories. On a task
without text every paragraph here does nothing, so a program that has them stays valid.
"""

# text -> (phrase, code): the free-text columns (`docs`, train and test rows) as a matrix
# T_all (sparse TF-IDF, or dense components); None when the task has no text.
TEXT = {
    "word": ("TF-IDF of the words of the text columns", '''\
from sklearn.feature_extraction.text import TfidfVectorizer
T_all = None
if text_cols:
    T_all = TfidfVectorizer(ngram_range=(1, 1), min_df=2, max_features=30000, sublinear_tf=True).fit_transform(docs)
'''),
    "word_bigram": ("TF-IDF of the words and word pairs of the text columns", '''\
from sklearn.feature_extraction.text import TfidfVectorizer
T_all = None
if text_cols:
    T_all = TfidfVectorizer(ngram_range=(1, 2), min_df=2, max_features=60000, sublinear_tf=True).fit_transform(docs)
'''),
    "char": ("TF-IDF of character 2- to 5-grams of the text columns", '''\
from sklearn.feature_extraction.text import TfidfVectorizer
T_all = None
if text_cols:
    T_all = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), min_df=2, max_features=60000, sublinear_tf=True).fit_transform(docs)
'''),
    "word_char": ("TF-IDF of the words and of the character n-grams of the text columns, "
                  "side by side", '''\
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer
T_all = None
if text_cols:
    T_all = sparse.hstack([TfidfVectorizer(ngram_range=(1, 2), min_df=2, max_features=40000, sublinear_tf=True).fit_transform(docs), TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), min_df=2, max_features=40000, sublinear_tf=True).fit_transform(docs)]).tocsr()
'''),
    "word_svd": ("word TF-IDF reduced to 64 components, also given to the model as features",
                 '''\
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
T_all = None
if text_cols:
    W = TfidfVectorizer(ngram_range=(1, 2), min_df=2, max_features=40000, sublinear_tf=True).fit_transform(docs)
    T_all = TruncatedSVD(n_components=max(1, min(64, W.shape[1] - 1)), random_state=0).fit_transform(W)
    X, X_test = np.hstack([X, T_all[:len(X)]]), np.hstack([X_test, T_all[len(X):]])
'''),
}

# text model -> (phrase, code): a linear model of T_all whose out-of-fold predictions (class
# probabilities, or the targets) become features of X; the test rows get the predictions of
# the model fitted on all train rows. Nothing when the task has no text.
_STACK = '''\
if T_all is not None:
    from sklearn.model_selection import KFold
    T, T_test = T_all[:len(X)], T_all[len(X):]
    t = y if kind != "regress" else center(y)
    oof = None
    for tr, va in KFold(n_splits=5, shuffle=True, random_state=1).split(T):
        p = text_predict(T[tr], t[tr], T[va])
        oof = np.zeros((len(X), p.shape[1])) if oof is None else oof
        oof[va] = p
    X, X_test = np.hstack([X, oof]), np.hstack([X_test, text_predict(T, t, T_test)])
    print("text model features:", oof.shape[1])
'''
_ALIGN = '''\
def text_proba(model, B):
    p = np.zeros((B.shape[0], len(classes)))
    p[:, np.searchsorted(classes, model.classes_)] = model.predict_proba(B)
    return p[:, 1:] if len(classes) == 2 else p
'''
TEXT_MODELS = {
    "logistic": ("logistic (or ridge) regression on the text, its out-of-fold predictions "
                 "as features", '''\
# text model: logistic
from sklearn.linear_model import LogisticRegression, Ridge
''' + _ALIGN + '''\
def text_predict(A, t, B):
    if kind == "regress":
        return Ridge(alpha=1.0).fit(A, t).predict(B).reshape(B.shape[0], -1)
    return text_proba(LogisticRegression(C=4.0, max_iter=2000).fit(A, t), B)
''' + _STACK),
    "nbsvm": ("NB-SVM (logistic regression on naive-Bayes-scaled text, one per class), its "
              "out-of-fold predictions as features", '''\
# text model: nbsvm
from scipy import sparse
from sklearn.linear_model import LogisticRegression, Ridge
def text_predict(A, t, B):
    A, B = sparse.csr_matrix(A), sparse.csr_matrix(B)
    if kind == "regress":
        return Ridge(alpha=1.0).fit(A, t).predict(B).reshape(B.shape[0], -1)
    P = A.maximum(0)
    cols = []
    for c in (classes[1:] if len(classes) == 2 else classes):
        on = np.asarray(t == c)
        if on.all() or not on.any():
            cols.append(np.full(B.shape[0], on.mean()))
            continue
        r = np.log((np.asarray(P[on].sum(0)).ravel() + 1) / (on.sum() + 1)) - np.log((np.asarray(P[~on].sum(0)).ravel() + 1) / ((~on).sum() + 1))
        m = LogisticRegression(C=4.0, max_iter=2000).fit(A.multiply(r).tocsr(), on)
        cols.append(m.predict_proba(B.multiply(r).tocsr())[:, 1])
    p = np.column_stack(cols)
    return p if len(classes) == 2 else p / np.maximum(p.sum(1, keepdims=True), 1e-12)
''' + _STACK),
    "svm": ("a linear SVM on the text (calibrated, or a linear SVR), its out-of-fold "
            "predictions as features", '''\
# text model: svm
from sklearn.calibration import CalibratedClassifierCV
from sklearn.linear_model import LogisticRegression
from sklearn.multioutput import MultiOutputRegressor
from sklearn.svm import LinearSVC, LinearSVR
''' + _ALIGN + '''\
def text_predict(A, t, B):
    if kind == "regress":
        return MultiOutputRegressor(LinearSVR(C=0.3, max_iter=5000, random_state=0)).fit(A, t).predict(B).reshape(B.shape[0], -1)
    cv = int(min(3, np.unique(t, return_counts=True)[1].min()))
    if cv < 2:
        return text_proba(LogisticRegression(C=4.0, max_iter=2000).fit(A, t), B)
    return text_proba(CalibratedClassifierCV(LinearSVC(C=0.3, max_iter=5000, random_state=0), cv=cv).fit(A, t), B)
''' + _STACK),
}
