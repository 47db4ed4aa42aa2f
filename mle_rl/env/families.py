"""Which model families a program uses, read off its code (for diversity and collapse stats)."""

from __future__ import annotations

import re

# family -> estimator class-name patterns (scikit-learn and the usual libraries).
FAMILIES = {
    "linear": r"\b(LogisticRegression\w*|LinearRegression|Ridge\w*|Lasso\w*|ElasticNet\w*|"
              r"SGD(Classifier|Regressor)|LinearSVC|LinearSVR|Perceptron|BayesianRidge|"
              r"HuberRegressor|PassiveAggressive\w*)\b",
    "knn": r"\bKNeighbors(Classifier|Regressor)\b",
    "naive_bayes": r"\b(Gaussian|Multinomial|Bernoulli|Complement|Categorical)NB\b",
    "svm": r"\b(SVC|SVR|NuSVC|NuSVR)\b",
    "random_forest": r"\bRandomForest(Classifier|Regressor)\b",
    "extra_trees": r"\bExtraTrees(Classifier|Regressor)\b",
    "decision_tree": r"\bDecisionTree(Classifier|Regressor)\b",
    "gradient_boosting": r"\b(HistGradientBoosting(Classifier|Regressor)|"
                         r"GradientBoosting(Classifier|Regressor)|XGB\w+|LGBM\w+|CatBoost\w+)\b",
    "adaboost": r"\bAdaBoost(Classifier|Regressor)\b",
    "mlp": r"\bMLP(Classifier|Regressor)\b",
    "discriminant": r"\b(Linear|Quadratic)DiscriminantAnalysis\b",
    "gaussian_process": r"\bGaussianProcess(Classifier|Regressor)\b",
    "heuristic": r"\bDummy(Classifier|Regressor)\b",
}
_COMPILED = {k: re.compile(v) for k, v in FAMILIES.items()}


def model_families(code: str) -> tuple:
    """Sorted names of the model families whose estimators appear in `code`."""
    if not code:
        return ()
    return tuple(sorted(k for k, rx in _COMPILED.items() if rx.search(code)))


# A program may say which family it is, on a line of its own: `# model family: <name>`
# (the warm start's task-generic programs do, since one of them names a classifier and a
# regressor, possibly of two families, and picks at run time). Action-pool names map here.
_DECLARED = re.compile(r"^# model family: (\w+)$", re.M)
_ALIASES = {"hist_gb": "gradient_boosting"}


def declared_family(code: str):
    """The family a `# model family: <name>` line declares (one such line), else None."""
    found = _DECLARED.findall(code or "")
    return _ALIASES.get(found[0], found[0]) if len(found) == 1 else None


def primary_family(code: str) -> str:
    """One label per program: its declared family, else its family, 'ensemble' for
    several, 'none' for none."""
    declared = declared_family(code)
    if declared:
        return declared
    fams = model_families(code)
    if not fams:
        return "none"
    return fams[0] if len(fams) == 1 else "ensemble"
