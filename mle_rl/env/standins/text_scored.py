"""Text stand-ins scored by number or preference: lmsys-chatbot-arena,
learning-agency-lab-automated-essay-scoring-2, us-patent-phrase-to-phrase-matching and
feedback-prize-english-language-learning (Kaggle's layout: not an MLE-bench task).

Text is docstring prose (`text_sources.frame()`); the targets follow measurable properties
of it (word overlap with the prompt, length, injected errors, shared words), with noise.
"""

from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import pandas as pd

from mle_rl.env.standins import common as C
from mle_rl.env.standins.text import docs

# ----------------------------------------------------------------------------- lmsys

MODELS = {"gpt-4-1106-preview": 0.9, "gpt-4-0613": 0.85, "claude-2.1": 0.75,
          "claude-instant-1": 0.65, "mixtral-8x7b-instruct-v0.1": 0.6, "gpt-3.5-turbo-0613": 0.6,
          "llama-2-70b-chat": 0.5, "vicuna-13b": 0.4, "llama-2-7b-chat": 0.35}
LMSYS_WIN = ("winner_model_a", "winner_model_b", "winner_tie")
ASK = ("What does {lib}'s `{name}` do? It starts: {head}", "Explain `{name}` ({lib}): {head}",
       "Can you describe {name} from {lib}? {head}", "{head} ... what is this in {lib}?")


def _answer(rng, doc, other, strength: float) -> tuple[str, float]:
    """(response text, its hidden quality): on topic with probability `strength`."""
    relevant = rng.random() < strength
    words = (doc if relevant else other)["text"].split()
    keep = max(4, int(len(words) * rng.uniform(0.3, 1.0)))
    text = " ".join(words[:keep])
    return text, 1.6 * relevant + 0.35 * np.log(keep)


def lmsys(prepared: pathlib.Path, rng) -> C.Built:
    n_train, n_test = 1500, 300
    n = n_train + n_test
    d, others = docs(rng, n), docs(rng, n)
    names = list(MODELS)
    rows = []
    ids = C.distinct_ints(rng, n, 30000, 4_294_967_295)
    for k in range(n):
        doc = d.iloc[k]
        a, b = rng.choice(len(names), size=2, replace=False)
        head = " ".join(doc["text"].split()[:int(rng.integers(5, 9))])
        prompt = [str(rng.choice(ASK)).format(lib=doc["library"], name=doc["name"], head=head)]
        ra, qa = _answer(rng, doc, others.iloc[k], MODELS[names[a]])
        rb, qb = _answer(rng, doc, others.iloc[(k + 1) % n], MODELS[names[b]])
        resp_a, resp_b = [ra], [rb]
        if rng.random() < 0.15:                          # a second turn
            prompt.append("Thanks. Can you give more detail?")
            resp_a.append(" ".join(ra.split()[:8]) + " and more.")
            resp_b.append(" ".join(rb.split()[:8]) + " and more.")
        diff = qa - qb + rng.normal(0, 0.5)
        logits = np.array([diff, -diff, 0.9 - abs(diff)])
        p = np.exp(logits - logits.max())
        win = rng.choice(3, p=p / p.sum())
        rows.append({"id": int(ids[k]), "model_a": names[a], "model_b": names[b],
                     "prompt": json.dumps(prompt), "response_a": json.dumps(resp_a),
                     "response_b": json.dumps(resp_b),
                     **{c: int(win == j) for j, c in enumerate(LMSYS_WIN)}})
    df = pd.DataFrame(rows)
    train, answers = df.iloc[:n_train], df.iloc[n_train:].reset_index(drop=True)
    pub, priv = prepared / "public", prepared / "private"
    C.write_csv(answers, priv / "answers.csv")
    C.write_csv(train, pub / "train.csv")
    C.write_csv(answers[["id", "prompt", "response_a", "response_b"]], pub / "test.csv")
    C.write_csv(answers[["id"]].assign(**{c: 0.3333333333333333 for c in LMSYS_WIN}),
                pub / "sample_submission.csv")
    C.write_description(prepared, C.describe(
        title="Chatbot arena: which response do people prefer",
        goal="Each row is a prompt answered by two chat models (A and B) and the verdict of a "
             "person: A wins, B wins, or a tie. Predict the probability of each verdict for "
             "the test conversations (the model names are only in train.csv).",
        metric="Multi-class log loss over the three verdicts (lower is better); each row "
               "must sum to 1.",
        files={"train.csv": "`id`, `model_a`, `model_b`, `prompt`, `response_a`, "
                            "`response_b` (JSON lists of turns), and the one-hot verdict "
                            "`winner_model_a`, `winner_model_b`, `winner_tie`",
               "test.csv": "`id`, `prompt`, `response_a`, `response_b`",
               "sample_submission.csv": "the format, with 1/3 everywhere"},
        submission="One row per test `id` with the three probabilities.",
        header=["id", *LMSYS_WIN]))
    return C.Built(f"{n_train} train / {n_test} test", "docstrings as prompts and replies",
                   "the on-topic (prompt words reappear) and longer reply wins; close "
                   "qualities tie")


# ----------------------------------------------------------------------------- essays

SCORE_SHARE = (0.07, 0.27, 0.36, 0.23, 0.06, 0.01)


def _typo(rng, word: str) -> str:
    if len(word) < 4:
        return word
    k = int(rng.integers(1, len(word) - 2))
    return word[:k] + word[k + 1] + word[k] + word[k + 2:]


def _essay(rng, paragraphs: list[str], cap_err: float, stop_err: float, typo: float) -> str:
    out = []
    for para in paragraphs:
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", para) if s]
        fixed = []
        for s in sentences:
            words = [_typo(rng, w) if rng.random() < typo else w for w in s.split()]
            s = " ".join(words)
            if rng.random() < cap_err:
                s = s[:1].lower() + s[1:]
            if rng.random() < stop_err:
                s = s.rstrip(".!?")
            fixed.append(s)
        out.append(" ".join(fixed))
    return "\n\n".join(out)


def _essay_rows(rng, n: int, pool: pd.DataFrame):
    """(texts, error levels [n, 3], paragraph counts, word counts)."""
    texts, errs, paras, words = [], np.zeros((n, 3)), np.zeros(n), np.zeros(n)
    for k in range(n):
        m = int(rng.integers(1, 7))
        chosen = pool["text"].iloc[rng.choice(len(pool), size=m, replace=False)].tolist()
        errs[k] = (rng.uniform(0, 0.7), rng.uniform(0, 0.6), rng.uniform(0, 0.12))
        texts.append(_essay(rng, chosen, *errs[k]))
        paras[k], words[k] = m, len(texts[-1].split())
    return texts, errs, paras, words


def essays(prepared: pathlib.Path, rng) -> C.Built:
    n_train, n_test = 1400, 300
    n = n_train + n_test
    pool = docs(rng, 2500)
    texts, errs, paras, words = _essay_rows(rng, n, pool)
    latent = 0.9 * np.log(words) + 0.15 * paras - 1.5 * errs[:, 0] - 1.2 * errs[:, 1] - \
        9.0 * errs[:, 2] + rng.normal(0, 0.35, n)
    cuts = np.quantile(latent, np.cumsum(SCORE_SHARE)[:-1])
    score = 1 + np.searchsorted(cuts, latent)
    df = pd.DataFrame({"essay_id": C.hex_ids(rng, n, 7), "full_text": texts, "score": score})
    train, answers = df.iloc[:n_train], df.iloc[n_train:].reset_index(drop=True)
    sample = answers[["essay_id"]].copy()
    sample["score"] = np.random.RandomState(42).randint(1, 7, size=len(sample))
    pub, priv = prepared / "public", prepared / "private"
    C.write_csv(answers, priv / "answers.csv")
    C.write_csv(train, pub / "train.csv")
    C.write_csv(answers.drop(columns=["score"]), pub / "test.csv")
    C.write_csv(sample, pub / "sample_submission.csv")
    C.write_description(prepared, C.describe(
        title="Automated essay scoring",
        goal="Each essay has a holistic score from 1 to 6. Predict the score of each test "
             "essay.",
        metric="Quadratic weighted kappa between predicted and true scores (higher is "
               "better; 1 is perfect agreement, 0 is chance).",
        files={"train.csv": "`essay_id`, `full_text` (paragraphs separated by blank lines), "
                            "`score`",
               "test.csv": "`essay_id`, `full_text`",
               "sample_submission.csv": "the format, with random scores"},
        submission="One row per test `essay_id` with an integer `score` in 1..6.",
        header=["essay_id", "score"]))
    return C.Built(f"{n_train} train / {n_test} test", "docstrings as essay paragraphs",
                   "score rises with length and paragraphs, falls with lower-case sentence "
                   "starts, missing full stops and typos")


# ----------------------------------------------------------------------------- patent

CPC = {"numpy": ("G06", "G01"), "pandas": ("G06", "H04"), "scikit-learn": ("G06", "G16"),
       "scipy": ("G01", "H03"), "python-stdlib": ("H04", "G05")}
STOP = frozenset("the and for with that this from are was were not its into than then also "
                 "when which will can may has have been their there these those such only "
                 "each other more most some any all".split())
PATENT_SCORES = (0.0, 0.25, 0.5, 0.75, 1.0)


def _content(text: str) -> list[str]:
    words = re.findall(r"[a-z]{3,}", text.lower())
    return list(dict.fromkeys(w for w in words if w not in STOP))


def _flip_plural(w: str) -> str:
    return w[:-1] if w.endswith("s") else w + "s"


def _target(rng, score: float, anchor: list[str], words: list[str], foreign: list[str]):
    rest = [w for w in words if w not in anchor]
    if score == 1.0:
        k = int(rng.integers(len(anchor)))
        return anchor[:k] + [_flip_plural(anchor[k])] + anchor[k + 1:]
    if score == 0.75:
        return anchor + [str(rng.choice(rest))] if len(anchor) < 3 else anchor[1:]
    if score == 0.5:
        return [str(rng.choice(anchor)), str(rng.choice(rest))]
    if score == 0.25:
        return [str(w) for w in rng.choice(rest, size=2, replace=False)]
    return [str(w) for w in rng.choice(foreign, size=2, replace=False)]


def patent(prepared: pathlib.Path, rng) -> C.Built:
    n_train, n_test = 1700, 300
    n = n_train + n_test
    pool = docs(rng, 600)
    pool = pool[[len(_content(t)) >= 8 for t in pool["text"]]].reset_index(drop=True)
    anchors = pool.iloc[:130]
    rows = []
    for k in range(n):
        a = anchors.iloc[k % len(anchors)]
        words = _content(a["text"])
        anchor = words[:2] if k % 3 else words[1:4]
        other = pool[pool["library"] != a["library"]]
        foreign = _content(other["text"].iloc[int(rng.integers(len(other)))])
        score = float(rng.choice(PATENT_SCORES, p=[0.2, 0.3, 0.3, 0.14, 0.06]))
        target = _target(rng, score, anchor, words, foreign)
        if rng.random() < 0.1:                           # raters disagree
            score = float(np.clip(score + rng.choice([-0.25, 0.25]), 0, 1))
        rows.append({"anchor": " ".join(anchor), "target": " ".join(target),
                     "context": str(rng.choice(CPC[a["library"]])), "score": score})
    df = pd.DataFrame(rows).iloc[rng.permutation(n)].reset_index(drop=True)
    df.insert(0, "id", C.hex_ids(rng, n, 16))
    train, test = df.iloc[:n_train], df.iloc[n_train:].reset_index(drop=True)
    pub, priv = prepared / "public", prepared / "private"
    C.write_csv(train, pub / "train.csv")
    C.write_csv(test, priv / "test.csv")
    C.write_csv(test.drop(columns=["score"]), pub / "test.csv")
    # As MLE-bench's: score 0 everywhere, a constant, so Pearson's r is undefined and the
    # grader refuses the sample (MLE-bench reports NaN).
    C.write_csv(test[["id"]].assign(score=0), pub / "sample_submission.csv")
    C.write_description(prepared, C.describe(
        title="Phrase to phrase matching",
        goal="Each row pairs an anchor phrase with a target phrase within a context class "
             "code. Predict how similar in meaning they are, from 0 (unrelated) to 1 (the "
             "same), in steps of 0.25.",
        metric="Pearson correlation between predicted and true scores (higher is better).",
        files={"train.csv": "`id`, `anchor`, `target`, `context`, `score`",
               "test.csv": "`id`, `anchor`, `target`, `context`",
               "sample_submission.csv": "the format only: its constant scores cannot be "
                                        "graded (the correlation is undefined)"},
        submission="One row per test `id` with a numeric `score`; predictions must vary.",
        header=["id", "score"]))
    return C.Built(f"{n_train} train / {n_test} test", "docstring words as phrases",
                   "score follows word overlap with the anchor; 0.25 vs 0 needs the topic "
                   "(same docstring vs another library); 10% rater noise")


# ----------------------------------------------------------------------------- feedback

FEEDBACK = ("cohesion", "syntax", "vocabulary", "phraseology", "grammar", "conventions")
LINKS = ("However,", "Therefore,", "In addition,", "For example,", "As a result,")


def feedback(prepared: pathlib.Path, rng) -> C.Built:
    n_train, n_test = 1200, 300
    n = n_train + n_test
    pool = docs(rng, 2500)
    texts, errs, paras, words = [], np.zeros((n, 3)), np.zeros(n), np.zeros(n)
    links, wlen, slen = np.zeros(n), np.zeros(n), np.zeros(n)
    for k in range(n):
        m = int(rng.integers(2, 6))
        chosen = pool["text"].iloc[rng.choice(len(pool), size=m, replace=False)].tolist()
        links[k] = int(rng.integers(0, m))
        chosen = [f"{rng.choice(LINKS)} {p[:1].lower()}{p[1:]}" if j < links[k] else p
                  for j, p in enumerate(chosen)]
        errs[k] = (rng.uniform(0, 0.7), rng.uniform(0, 0.6), rng.uniform(0, 0.1))
        texts.append(_essay(rng, chosen, *errs[k]))
        toks = texts[-1].split()
        paras[k], words[k] = m, len(toks)
        wlen[k] = np.mean([len(t) for t in toks])
        slen[k] = len(toks) / max(1, len(re.findall(r"[.!?](\s|$)", texts[-1])))
    z = lambda x: (x - x.mean()) / (x.std() + 1e-9)
    shared = rng.normal(0, 0.2, n)
    raw = {"cohesion": 2.8 + 0.35 * links + 0.1 * paras - 0.6 * errs[:, 1],
           "syntax": 3.2 + 0.3 * z(np.log(slen)) - 1.2 * errs[:, 1] - 3 * errs[:, 2],
           "vocabulary": 3.1 + 0.45 * z(wlen),
           "phraseology": 3.3 + 0.25 * z(wlen) - 6 * errs[:, 2] - 0.5 * errs[:, 0],
           "grammar": 3.5 - 9 * errs[:, 2] - 0.6 * errs[:, 1],
           "conventions": 3.7 - 1.6 * errs[:, 0] - 1.3 * errs[:, 1]}
    scores = {c: np.clip(np.round(2 * (v + shared + rng.normal(0, 0.25, n))) / 2, 1.0, 5.0)
              for c, v in raw.items()}
    df = pd.DataFrame({"text_id": C.hex_ids(rng, n, 12, upper=True), "full_text": texts,
                       **scores})
    train, test = df.iloc[:n_train], df.iloc[n_train:].reset_index(drop=True)
    pub, priv = prepared / "public", prepared / "private"
    C.write_csv(train, pub / "train.csv")
    C.write_csv(test[["text_id", "full_text"]], pub / "test.csv")
    C.write_csv(test[["text_id"]].assign(**{c: 3.0 for c in FEEDBACK}),
                pub / "sample_submission.csv")
    C.write_csv(test[["text_id", *FEEDBACK]], priv / "answers.csv")
    C.write_description(prepared, C.describe(
        title="English language learning: analytic essay scores",
        goal="Each essay is rated on six analytic measures (cohesion, syntax, vocabulary, "
             "phraseology, grammar, conventions), from 1.0 to 5.0 in steps of 0.5. Predict "
             "the six scores of each test essay.",
        metric="MCRMSE: the root mean squared error of each of the six columns, averaged "
               "(lower is better).",
        files={"train.csv": "`text_id`, `full_text` and the six scores",
               "test.csv": "`text_id`, `full_text`",
               "sample_submission.csv": "the format, with 3.0 everywhere"},
        submission="One row per test `text_id` with six numeric predictions.",
        header=["text_id", *FEEDBACK]))
    return C.Built(f"{n_train} train / {n_test} test", "docstrings as essay paragraphs",
                   "linking words, word and sentence length, lower-case starts, missing "
                   "stops and typos move the six scores (with a shared per-essay offset)")
