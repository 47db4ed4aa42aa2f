"""Task-generic tabular programs: one grammar of decisions that runs on any tabular task.

A program reads the task's files and works out for itself what it must predict: the id
column is the first column of the sample submission that the test file also has, the
targets are the sample's columns that test lacks (one-hot columns are one class label),
and the output kind comes from the sample submission (class-probability columns, a
probability, a class label, or numbers). So a program written for one task runs
on any other, and a policy trained on these programs carries them to tasks it has never
seen. What the policy decides is what an engineer decides, each as its own paragraph (and
so, with the warm start's tokenizer, its own token):

    metric          copied from the prompt ("Metric: auc"): the validation score printed
    log_target      fit regression targets on log(1 + y) (what RMSLE rewards)
    model family    linear | knn | naive_bayes | svm | random_forest | extra_trees |
                    hist_gb | mlp (classifier or regressor, whichever the task needs)
    capacity        1..5: the family's size (trees, iterations, hidden units, C, 1/k)
    regularization  1..5: the family's regularization (leaf size, alpha, 1/C, smoothing)
    features        median_scale | quantile | rowstats | signed_log | pca | missing_flags
    validation      holdout | kfold3 | kfold5 (fold models averaged on the test set)
    text            none | word | word_bigram | char | word_char | word_svd: how the free-text
                    columns (found by their content) become a matrix
    text model      logistic | nbsvm | svm: a linear model of that matrix whose out-of-fold
                    predictions join the table's features (stacking), so every family above
                    works on text, alone or beside numeric and categorical columns
    image           none | pixels | color | hog | pca: features of the images the rows name
                    (found by the files, see `generic_image_code.py`), joined to the table's
                    features, so every family above works on pictures too

The program text is in `generic_header.py` (reading the task) and `generic_code.py` (the
decisions; text and images in `generic_text_code.py` and `generic_image_code.py`). Every
combination of values is a valid program (`tests/test_generic_programs.py` runs them), so a
recombination, or a value the corpus
never paired with a family on a task, is something RL can find and keep. The plan names
the family, the features and the validation, one paragraph each, in the order of the code.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import random
import re
from typing import Optional

from mle_rl.warmstart.generic_code import FAMILIES, FEATURES, HEADER, VALIDATION, WRITER
from mle_rl.warmstart.generic_image_code import IMAGE
from mle_rl.warmstart.generic_text_code import TEXT, TEXT_MODELS

CAPACITIES = REGULARIZATIONS = (1, 2, 3, 4, 5)
REGRESSION_METRICS = ("rmse", "mae", "rmsle_column_mean", "mcrmse", "pearson")
LOG_METRICS = ("rmsle_column_mean",)


@dataclasses.dataclass(frozen=True)
class Choice:
    """One value per decision (see the module docstring)."""

    metric: str
    family: str
    capacity: int
    regularization: int
    features: str
    validation: str
    log_target: bool = False
    text: str = "none"               # "none": no text paragraphs (a table without text)
    text_model: str = "logistic"     # ignored when text == "none"
    image: str = "none"              # "none": no image paragraph (a task without images)

    def __post_init__(self):
        for name, value, allowed in (("family", self.family, FAMILIES),
                                     ("features", self.features, FEATURES),
                                     ("validation", self.validation, VALIDATION),
                                     ("text", self.text, ("none", *TEXT)),
                                     ("text_model", self.text_model, TEXT_MODELS),
                                     ("image", self.image, ("none", *IMAGE)),
                                     ("capacity", self.capacity, CAPACITIES),
                                     ("regularization", self.regularization, REGULARIZATIONS)):
            if value not in allowed:
                raise ValueError(f"Unknown {name} {value!r}; one of {list(allowed)}.")
        if not re.fullmatch(r"[a-z0-9_]+", self.metric):
            raise ValueError(f"A metric name is lower-case letters, digits and '_', not "
                             f"{self.metric!r}.")

    @property
    def key(self) -> str:
        text = f"+{self.text}~{self.text_model}" if self.text != "none" else ""
        image = f"+img_{self.image}" if self.image != "none" else ""
        return (f"{self.features}+{self.family}+{self.validation}"
                f"+c{self.capacity}r{self.regularization}{'+log' if self.log_target else ''}"
                f"{text}{image}")


def plan_text(choice: Choice) -> str:
    """The plan: model, features and validation, one paragraph each (one token each with
    the warm start's tokenizer), in the order of the code."""
    text = f"Images: {IMAGE[choice.image][0]}.\n\n" if choice.image != "none" else ""
    if choice.text != "none":
        text += (f"Text: {TEXT[choice.text][0]}.\n\n"
                 f"Text model: {TEXT_MODELS[choice.text_model][0]}.\n\n")
    return (f"{text}Model: {FAMILIES[choice.family][0]}.\n\n"
            f"Features: {FEATURES[choice.features][0]}.\n\n"
            f"Validation: {VALIDATION[choice.validation][0]}.")


def blocks(choice: Choice) -> list[str]:
    """The program's paragraphs, in order: header, each decision, the writer."""
    return [HEADER,
            f'metric = "{choice.metric}"\n',
            f"log_target = {choice.log_target}\n",
            *([IMAGE[choice.image][1]] if choice.image != "none" else []),
            *([TEXT[choice.text][1], TEXT_MODELS[choice.text_model][1]]
              if choice.text != "none" else []),
            FAMILIES[choice.family][1],
            f"capacity = {choice.capacity}\n",
            f"regularization = {choice.regularization}\n",
            FEATURES[choice.features][1],
            VALIDATION[choice.validation][1],
            WRITER]


def render(choice: Choice) -> tuple[str, str]:
    """(plan, code) of one choice."""
    return plan_text(choice), "\n".join(blocks(choice))


_DECISION = {
    "metric": re.compile(r'^metric = "([a-z0-9_]+)"$', re.M),
    "log_target": re.compile(r"^log_target = (True|False)$", re.M),
    "capacity": re.compile(r"^capacity = (\d)$", re.M),
    "regularization": re.compile(r"^regularization = (\d)$", re.M),
}


def parse(code: str) -> Optional[Choice]:
    """The choice a generic program was written from, or None when `code` is not one
    (read back from its paragraphs, for statistics of what a policy decides)."""
    paragraphs = [p.strip() for p in (code or "").split("\n\n")]
    if HEADER.strip() not in paragraphs:
        return None
    found = {k: rx.findall(code) for k, rx in _DECISION.items()}
    if any(len(v) != 1 for v in found.values()):
        return None
    named = {}
    for axis, table in (("family", FAMILIES), ("features", FEATURES),
                        ("validation", VALIDATION)):
        hits = [k for k, (_, block) in table.items() if block.strip() in paragraphs]
        if len(hits) != 1:
            return None
        named[axis] = hits[0]
    hits = {axis: [k for k, (_, block) in table.items() if block.strip() in paragraphs]
            for axis, table in (("text", TEXT), ("text_model", TEXT_MODELS))}
    if any(len(v) > 1 for v in hits.values()) or bool(hits["text"]) != bool(hits["text_model"]):
        return None
    if hits["text"]:
        named.update(text=hits["text"][0], text_model=hits["text_model"][0])
    image = [k for k, (_, block) in IMAGE.items() if block.strip() in paragraphs]
    if len(image) > 1:
        return None
    if image:
        named["image"] = image[0]
    try:
        return Choice(metric=found["metric"][0], log_target=found["log_target"][0] == "True",
                      capacity=int(found["capacity"][0]),
                      regularization=int(found["regularization"][0]), **named)
    except ValueError:
        return None


def has_text(public_dir, rows: int = 2000) -> bool:
    """Whether a task's train.csv (or train.json) has a free-text column, by the HEADER's own rule (a column
    of strings with more than 30 distinct values and 1.5 words or more on average)."""
    import pandas as pd

    public = pathlib.Path(public_dir)
    try:
        if (public / "train.csv").is_file() or not (public / "train.json").is_file():
            df = pd.read_csv(public / "train.csv", nrows=rows)
        else:
            df = pd.read_json(public / "train.json").head(rows)
    except (OSError, ValueError):
        return False
    for c in df.columns:
        if not pd.api.types.is_numeric_dtype(df[c]):
            s = df[c].astype(str)
            if s.nunique() > 30 and s.str.split().str.len().mean() >= 1.5:
                return True
    return False


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif")


def has_images(public_dir) -> bool:
    """Whether a task may hold pictures: image files anywhere in its folder, or archives
    (.zip, .7z) that may hold them or records of pixel bands; the image paragraphs do nothing
    where the HEADER finds none."""
    public = pathlib.Path(public_dir)
    for f in public.rglob("*"):
        if f.suffix.lower() in IMAGE_SUFFIXES or f.suffix.lower() in (".zip", ".7z"):
            return True
    return False


def is_regression(metric: str) -> bool:
    return metric in REGRESSION_METRICS


def all_choices(metric: str, text: bool = False, images: bool = False) -> list[Choice]:
    """Every choice for a task scored by `metric` (log_target only for regression; the text
    decisions only for a task with free-text columns, `text`; the image decision only for a
    task with pictures, `images`)."""
    logs = (True, False) if is_regression(metric) else (False,)
    texts = list(itertools.product(TEXT, TEXT_MODELS)) if text else [("none", "logistic")]
    imgs = ["none", *IMAGE] if images else ["none"]     # a table beside pictures may need none
    return [Choice(metric, f, c, r, feat, v, lg, tx, tm, im)
            for f, c, r, feat, v, lg, (tx, tm), im in itertools.product(
                FAMILIES, CAPACITIES, REGULARIZATIONS, FEATURES, VALIDATION, logs, texts, imgs)]


def sample_choices(metric: str, n: int, rng: random.Random, exclude=None,
                   text: bool = False, images: bool = False) -> list[Choice]:
    """`n` distinct choices spread over the decisions: families, features, validations
    (and, for a task with free-text columns, `text`, the text features and text models; for
    a task with pictures, `images`, the image features) are dealt round-robin from shuffled
    orders (so n >= 8 covers every family), capacity and
    regularization drawn at random; log_target is what the metric calls for (RMSLE: yes;
    other regression metrics: at random; classification: no). `exclude(choice)`:
    combinations too slow for the task."""
    fams, feats, vals = list(FAMILIES), list(FEATURES), list(VALIDATION)
    texts, models = (list(TEXT), list(TEXT_MODELS)) if text else (["none"], ["logistic"])
    imgs = ["none", *IMAGE] if images else ["none"]
    for seq in (fams, feats, vals, texts, models, imgs):
        rng.shuffle(seq)
    out, seen, tries = [], set(), 0
    while len(out) < n and tries < 50 * max(n, 1):
        i = tries
        tries += 1
        log = metric in LOG_METRICS or (is_regression(metric) and rng.random() < 0.5)
        c = Choice(metric, fams[i % len(fams)], rng.choice(CAPACITIES),
                   rng.choice(REGULARIZATIONS), feats[i % len(feats)], vals[i % len(vals)], log,
                   texts[i % len(texts)], models[i % len(models)], imgs[i % len(imgs)])
        if c in seen or (exclude is not None and exclude(c)):
            continue
        seen.add(c)
        out.append(c)
    return out
