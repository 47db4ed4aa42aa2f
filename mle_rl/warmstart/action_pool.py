"""The action pool (ML-Agent, "exploration-enriched fine-tuning"): strategies on three axes.

* data: how the inputs become features (TF-IDF / character n-grams for text, pixel
  features / PCA for images, word shapes for spans);
* model: the model family (linear, k-NN, naive Bayes, SVM, random forest, extra trees,
  histogram gradient boosting, MLP);
* learning: how it is validated and tuned (hold-out, k-fold, a small grid search, early
  stopping, a blend with a second model).

A `Combo` is one strategy per axis; `programs.render(task, combo)` turns it into a plan
sentence and a program for the built-in image, text and span tasks (tables have their own,
finer decisions: `generic.py`). `choose_combos` picks combinations by farthest-point
sampling over the one-hot strategy vectors, so a few programs already cover many families
and ideas.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Callable, Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Strategy:
    """One idea on one axis. `phrase` names it in the plan; `modalities` where it applies
    ("tabular" | "text" | "image" | "span"); `needs_dense` (models): sparse text features
    are reduced with truncated SVD first; `kinds`: problem kinds it supports."""

    axis: str
    name: str
    phrase: str
    modalities: tuple = ("tabular", "text", "image", "span")
    kinds: tuple = ("binary", "multiclass", "regression", "multireg")
    needs_dense: bool = False


DATA = (
    Strategy("data", "word_tfidf", "TF-IDF of word unigrams and bigrams", ("text",)),
    Strategy("data", "char_tfidf", "TF-IDF of character 2-4 grams", ("text",)),
    Strategy("data", "word_char_tfidf", "word TF-IDF and character n-gram TF-IDF stacked",
             ("text",)),
    Strategy("data", "pixels", "raw pixel intensities, standardized", ("image",)),
    Strategy("data", "pixel_pca", "pixel intensities reduced to 40 whitened principal "
             "components", ("image",)),
    Strategy("data", "downsample", "images mean-pooled to 8x8 plus row and column ink "
             "profiles", ("image",)),
    Strategy("data", "word_shape", "word-shape features of each candidate start word "
             "(case, punctuation, position)", ("span",)),
    Strategy("data", "context", "word-shape features of each candidate start word and of its "
             "neighbours", ("span",)),
)

MODELS = (
    Strategy("model", "linear", "a linear model (logistic or ridge regression)"),
    Strategy("model", "knn", "k-nearest neighbours"),
    Strategy("model", "naive_bayes", "naive Bayes", kinds=("binary", "multiclass")),
    Strategy("model", "svm", "a support vector machine with an RBF kernel", needs_dense=False),
    Strategy("model", "random_forest", "a random forest", needs_dense=True),
    Strategy("model", "extra_trees", "extremely randomized trees", needs_dense=True),
    Strategy("model", "hist_gb", "histogram gradient boosting", needs_dense=True),
    Strategy("model", "mlp", "a small neural network (MLP)", needs_dense=True),
)

LEARNING = (
    Strategy("learning", "holdout", "validate on a 20% hold-out split, then refit on all "
             "the data"),
    Strategy("learning", "kfold", "3-fold cross-validation, averaging the fold models' test "
             "predictions", ("tabular", "text", "image")),
    Strategy("learning", "grid", "a small grid search with 3-fold cross-validation",
             ("tabular", "text", "image")),
    Strategy("learning", "early_stopping", "early stopping on a validation split, checked on "
             "a 20% hold-out"),
    Strategy("learning", "ensemble", "an average with a second model, checked on a 20% "
             "hold-out"),
)

AXES = {"data": DATA, "model": MODELS, "learning": LEARNING}
EARLY_STOPPING_FAMILIES = ("hist_gb", "mlp")


@dataclasses.dataclass(frozen=True)
class Combo:
    """One idea per axis (1-3 of them named in the plan: the data and learning ideas may be
    the plain defaults)."""

    data: Strategy
    model: Strategy
    learning: Strategy

    @property
    def key(self) -> str:
        return f"{self.data.name}+{self.model.name}+{self.learning.name}"


def compatible(modality: str, kind: str, data: Strategy, model: Strategy,
               learning: Strategy) -> bool:
    """Whether the three ideas make a program for this modality and problem kind."""
    if modality not in data.modalities or modality not in learning.modalities:
        return False
    if kind not in model.kinds:
        return False
    if learning.name == "early_stopping" and model.name not in EARLY_STOPPING_FAMILIES:
        return False
    if modality == "span" and model.name == "svm":
        return False   # thousands of candidate words: an RBF SVM with probabilities is too slow
    return True


def all_combos(modality: str, kind: str,
               exclude: Optional[Callable[[Combo], bool]] = None) -> list[Combo]:
    """Every compatible (data, model, learning) combination not `exclude`d, in a fixed
    order."""
    combos = [Combo(d, m, lr) for d in DATA for m in MODELS for lr in LEARNING
              if compatible(modality, kind, d, m, lr)]
    return [c for c in combos if exclude is None or not exclude(c)]


def _vector(combo: Combo) -> np.ndarray:
    """One-hot over every strategy of every axis; the model axis counts double, so the
    sampling spreads over families first."""
    parts = []
    for axis, chosen, weight in (("data", combo.data, 1.0), ("model", combo.model, 2.0),
                                 ("learning", combo.learning, 1.0)):
        parts.append([weight if s == chosen else 0.0 for s in AXES[axis]])
    return np.concatenate([np.asarray(p) for p in parts])


def choose_combos(modality: str, kind: str, n: int, seed: int = 0,
                  exclude: Optional[Callable[[Combo], bool]] = None) -> list[Combo]:
    """`n` combinations by farthest-point sampling (random first point, ties broken at
    random): each next pick maximizes its distance to the closest pick so far."""
    pool = all_combos(modality, kind, exclude)
    if not pool:
        raise ValueError(f"No strategy combination fits modality {modality!r} and problem kind "
                         f"{kind!r}; add strategies for it to the action pool.")
    rng = random.Random(seed)
    vecs = np.stack([_vector(c) for c in pool])
    picks = [rng.randrange(len(pool))]
    dist = np.linalg.norm(vecs - vecs[picks[0]], axis=1)
    while len(picks) < min(n, len(pool)):
        best = np.flatnonzero(dist == dist.max())
        i = int(best[rng.randrange(len(best))])
        picks.append(i)
        dist = np.minimum(dist, np.linalg.norm(vecs - vecs[i], axis=1))
    return [pool[i] for i in picks]


def families(combos: Sequence[Combo]) -> set:
    return {c.model.name for c in combos}
