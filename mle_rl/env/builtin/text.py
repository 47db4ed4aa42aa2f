"""Text tasks built from the docstrings of installed libraries (see docstrings.py).

* docstring-authorship: which library does this docstring come from? 5 classes, log loss,
  like spooky-author-identification.
* docstring-param-span: given a flattened numpydoc Parameters section and a parameter name,
  extract the span that describes the parameter; word Jaccard, like
  tweet-sentiment-extraction.
The data depends on the installed versions of numpy, pandas, scikit-learn, scipy and Python;
both tasks record those versions in their cache marker and in the description.
"""

from __future__ import annotations

import functools
import importlib.metadata
import pathlib
import platform

import numpy as np
import pandas as pd

from mle_rl.env.builtin import docstrings, writer
from mle_rl.env.builtin.spec import BuiltinSpec
from mle_rl.env.graders import TableGrader

SEED = 11
LIBRARIES = tuple(docstrings.MODULES)   # numpy, pandas, scikit-learn, scipy, python-stdlib
PER_LIBRARY = 600


@functools.lru_cache(maxsize=1)
def _harvest() -> dict:
    return docstrings.harvest()


def _versions_note() -> str:
    v = {d: importlib.metadata.version(d) for d in ("numpy", "pandas", "scikit-learn", "scipy")}
    return ("The text was harvested from the installed libraries (" +
            ", ".join(f"{k} {x}" for k, x in v.items()) +
            f", Python {platform.python_version()}); other versions give slightly different data.")


def _ids(n: int, prefix: str, rng) -> np.ndarray:
    return np.array([f"{prefix}{k:05d}" for k in rng.permutation(n)])


def build_authorship(root: pathlib.Path) -> None:
    rng = np.random.default_rng(SEED)
    rows, seen = [], set()
    for lib in LIBRARIES:
        texts = []
        for _, doc in _harvest()[lib]:
            text = docstrings.summary_text(doc)
            if len(text) >= 60 and text not in seen:
                seen.add(text)
                texts.append(text)
        pick = rng.permutation(len(texts))[:PER_LIBRARY]
        rows += [(texts[k], lib) for k in sorted(pick)]
    df = pd.DataFrame(rows, columns=["text", "library"])
    df.insert(0, "id", _ids(len(df), "doc", rng))
    tr, te = writer.split_ids(len(df), 0.3, SEED, stratify=df["library"].to_numpy())
    train = df.iloc[tr].sort_values("id")
    test_full = df.iloc[te].sort_values("id")
    answers = test_full[["id", "library"]]
    prior = train["library"].value_counts(normalize=True).reindex(LIBRARIES).fillna(0.0)
    sample = pd.DataFrame({"id": answers["id"].to_numpy()})
    for lib in LIBRARIES:
        sample[lib] = prior[lib]
    desc = writer.describe(
        title="Docstring Authorship",
        overview="Every Python library has its own voice. Each row holds the prose part of a "
                 "real docstring (its summary and extended description, on one line, without "
                 "parameter sections or examples) from one of five code bases: numpy, pandas, "
                 "scikit-learn, scipy or the Python standard library. Predict which library "
                 "each test docstring comes from.",
        files={"train.csv": f"{len(train)} docstrings with their library.",
               "test.csv": f"{len(test_full)} docstrings without it.",
               "sample_submission.csv": "a valid submission predicting the training prior."},
        columns={"id": "row identifier", "text": "the docstring text",
                 "library": f"the target, one of {', '.join(LIBRARIES)} (train only)"},
        notes=_versions_note(),
        metric="multiclass_log_loss",
        submission_text=f"Predict a probability for each library, in columns "
                        f"{', '.join(LIBRARIES)}.",
        sample_submission=sample)
    writer.write_task(root, description=desc, train=train, test=test_full.drop(columns="library"),
                      answers=answers, sample_submission=sample)


def _span_rows(rng) -> list[tuple[str, str, str]]:
    """[(text, param, selected_text)]: one parameter per docstring, text contains the span."""
    rows, seen = [], set()
    for lib in LIBRARIES:
        for _, doc in _harvest()[lib]:
            params = docstrings.parameters(docstrings.sections(doc).get("Parameters", ""))
            if not 2 <= len(params) <= 8 or any(not d for _, _, d in params):
                continue
            names = [n for n, _, _ in params]
            if len(set(names)) != len(names):
                continue
            parts = [" ".join(f"{n} : {t} {d}".split()) if t else f"{n} {d}" for n, t, d in params]
            text = " ".join(parts)
            if len(text) > 1200 or text in seen:
                continue
            candidates = [k for k, (_, _, d) in enumerate(params) if len(d.split()) >= 3]
            if not candidates:
                continue
            seen.add(text)
            k = candidates[rng.integers(len(candidates))]
            span = params[k][2]
            assert span in text
            rows.append((text, params[k][0], span))
    return rows


def build_param_span(root: pathlib.Path) -> None:
    rng = np.random.default_rng(SEED + 1)
    df = pd.DataFrame(_span_rows(rng), columns=["text", "param", "selected_text"])
    df.insert(0, "id", _ids(len(df), "p", rng))
    tr, te = writer.split_ids(len(df), 0.3, SEED + 1)
    train = df.iloc[tr].sort_values("id")
    test_full = df.iloc[te].sort_values("id")
    answers = test_full[["id", "selected_text"]]
    sample = test_full[["id", "text"]].rename(columns={"text": "selected_text"})
    desc = writer.describe(
        title="Docstring Parameter Span Extraction",
        overview="Each row holds the Parameters section of a real numpydoc-style docstring "
                 "(from numpy, pandas, scikit-learn or scipy), flattened onto one line: every "
                 "entry reads `name : type description`, one after the other, with all line "
                 "breaks and indentation removed. Given the name of one parameter, extract the "
                 "exact span of `text` that describes it: its description, without the name "
                 "and without the type.",
        files={"train.csv": f"{len(train)} rows with the span.",
               "test.csv": f"{len(test_full)} rows without it.",
               "sample_submission.csv": "a valid submission that returns the whole text."},
        columns={"id": "row identifier", "text": "the flattened Parameters section",
                 "param": "the parameter whose description to extract",
                 "selected_text": "the target: a substring of `text` (train only)"},
        notes=_versions_note(),
        metric="word_jaccard",
        submission_text="Predict `selected_text` for every test row; quote the field as CSV "
                        "requires (pandas' to_csv does it).",
        sample_submission=sample)
    writer.write_task(root, description=desc, train=train,
                      test=test_full.drop(columns="selected_text"), answers=answers,
                      sample_submission=sample)


_PACKAGES = docstrings.DISTRIBUTIONS

SPECS = (
    BuiltinSpec(id="docstring-authorship", metric="multiclass_log_loss", modality="text",
                grader=TableGrader("multiclass_log_loss", "id", LIBRARIES, answer_label="library"),
                build=build_authorship, timeout_s=90, memory_mb=4096, reward_scale=2.0,
                packages=_PACKAGES),
    BuiltinSpec(id="docstring-param-span", metric="word_jaccard", modality="text",
                grader=TableGrader("word_jaccard", "id", ("selected_text",)),
                build=build_param_span, timeout_s=90, memory_mb=4096, reward_scale=5.0,
                packages=_PACKAGES),
)
