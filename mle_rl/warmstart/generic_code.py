"""The text of the task-generic programs' decisions (`generic.py` composes them; the first
paragraph, HEADER, which reads the task, is in `generic_header.py`).

Each table maps a decision's value to (the plan's phrase, its paragraph); no paragraph has a
blank line inside, so with the warm start's paragraph pre-tokens each is one token.
"""

from mle_rl.warmstart.generic_header import HEADER  # noqa: F401  (generic.py's import)

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
