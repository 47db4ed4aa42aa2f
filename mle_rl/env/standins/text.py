"""Text stand-ins labelled by class: detecting-insults, random-acts-of-pizza,
tweet-sentiment-extraction, spooky-author-identification, jigsaw-toxic-comment.

The text is docstring prose of installed libraries (`text_sources.frame()`: numpy, pandas,
scikit-learn, scipy, the standard library). Labels follow what the text says: its library
(a topic a bag of words picks up), or marker words mixed into it, with label noise, so a
text model beats the sample submission clearly without reaching the perfect score.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pandas as pd

from mle_rl.env.standins import common as C


def docs(rng, n: int, libs=None, max_words: int = 0) -> pd.DataFrame:
    """n random docstring rows (optionally of some libraries), text cut to max_words."""
    from mle_rl.env.procedural.text_sources import frame

    df = frame()
    if libs is not None:
        df = df[df["library"].isin(libs)]
    df = df.iloc[rng.choice(len(df), size=n, replace=False)].reset_index(drop=True)
    if max_words:
        df["text"] = [" ".join(t.split()[:max_words]) for t in df["text"]]
    return df


# ----------------------------------------------------------------------------- insults


def insults(prepared: pathlib.Path, rng) -> C.Built:
    n_train, n_test = 1200, 300
    d = docs(rng, n_train + n_test)
    is_pandas = (d["library"] == "pandas").to_numpy()
    insult = C.bernoulli(rng, np.where(is_pandas, 0.85, 0.06))
    days = rng.integers(0, 120, len(d))
    stamp = pd.Timestamp("2012-03-01") + pd.to_timedelta(days, unit="D") + \
        pd.to_timedelta(rng.integers(0, 86400, len(d)), unit="s")
    date = [s.strftime("%Y%m%d%H%M%SZ") for s in stamp]
    date = [x if rng.random() > 0.18 else "" for x in date]     # the real dates are often empty
    df = pd.DataFrame({"Insult": insult, "Date": date,
                       "Comment": ['"' + t.replace('"', "'") + '"' for t in d["text"]]})
    train, test = df.iloc[:n_train], df.iloc[n_train:].reset_index(drop=True)
    pub, priv = prepared / "public", prepared / "private"
    C.write_csv(train, pub / "train.csv")
    private = test.assign(Usage=np.where(rng.random(n_test) < 0.3, "PublicTest", "PrivateTest"))
    C.write_csv(private, priv / "test.csv")
    C.write_csv(test[["Date", "Comment"]], pub / "test.csv")
    C.write_csv(test.assign(Insult=0), pub / "sample_submission_null.csv")
    C.write_description(prepared, C.describe(
        title="Detecting insults in social commentary",
        goal="Each row is a comment. Predict the probability that the comment is an insult "
             "(`Insult` = 1) for every comment of the test set.",
        metric="Area under the ROC curve (higher is better).",
        files={"train.csv": "`Insult` (0/1), `Date` (YYYYMMDDhhmmssZ, sometimes empty), "
                            "`Comment` (the text, in double quotes)",
               "test.csv": "`Date`, `Comment`",
               "sample_submission_null.csv": "a valid submission that predicts 0 everywhere"},
        submission="One row per test comment, with the comment text copied exactly (it is the "
                   "key) and `Insult` a probability in [0, 1].",
        header=["Insult", "Date", "Comment"]))
    return C.Built(f"{n_train} train / {n_test} test", "docstrings (text_sources)",
                   "insult = the comment is pandas documentation (85% vs 6%), a topic a bag "
                   "of words reads")


# ----------------------------------------------------------------------------- pizza

SUBREDDITS = ("AskReddit", "pics", "funny", "gaming", "IAmA", "Random_Acts_Of_Pizza",
              "todayilearned", "WTF", "videos", "trees", "Music", "food", "cooking", "science")
PIZZA_TEST_FIELDS = (
    "giver_username_if_known", "request_id", "request_text_edit_aware", "request_title",
    "requester_account_age_in_days_at_request", "requester_days_since_first_post_on_raop_at_request",
    "requester_number_of_comments_at_request", "requester_number_of_comments_in_raop_at_request",
    "requester_number_of_posts_at_request", "requester_number_of_posts_on_raop_at_request",
    "requester_number_of_subreddits_at_request", "requester_subreddits_at_request",
    "requester_upvotes_minus_downvotes_at_request", "requester_upvotes_plus_downvotes_at_request",
    "requester_username", "unix_timestamp_of_request", "unix_timestamp_of_request_utc")


def _pizza_record(rng, doc, rid: str, user: str) -> dict:
    age = float(np.round(rng.gamma(1.2, 250.0), 6)) if rng.random() > 0.1 else 0.0
    n_com, n_posts = int(rng.poisson(age / 8 + 1)), int(rng.poisson(age / 30 + 1))
    subs = sorted(rng.choice(SUBREDDITS, size=int(min(rng.poisson(age / 40), 12)),
                             replace=False).tolist())
    plus = int(rng.poisson(n_com * 6 + 1))
    t = int(1.30e9 + rng.integers(0, 7.0e7))
    score = -3.4 + 2.6 * (doc["library"] == "scipy") + 0.35 * np.log1p(age) + \
        0.6 * min(n_com, 40) / 40 + 0.6 * (doc["has_examples"] == 1) - 0.4
    got = bool(rng.random() < C.sigmoid(score))
    raop_days = float(np.round(rng.random() * age, 6)) if rng.random() < 0.2 else 0.0
    later = float(np.round(rng.uniform(300, 900), 6))
    text = doc["text"]
    rec = {
        "giver_username_if_known": "N/A" if not got or rng.random() < 0.8 else
        "user_" + "".join(rng.choice(C.B36, 6)),
        "number_of_downvotes_of_request_at_retrieval": int(rng.poisson(1.5)),
        "number_of_upvotes_of_request_at_retrieval": int(rng.poisson(3 + 2 * got)),
        "post_was_edited": bool(rng.random() < 0.1),
        "request_id": rid,
        "request_number_of_comments_at_retrieval": int(rng.poisson(1 + 3 * got)),
        "request_text": text,
        "request_text_edit_aware": text,
        "request_title": "[Request] " + " ".join(text.split()[:6]),
        "requester_account_age_in_days_at_request": age,
        "requester_account_age_in_days_at_retrieval": float(np.round(age + later, 6)),
        "requester_days_since_first_post_on_raop_at_request": raop_days,
        "requester_days_since_first_post_on_raop_at_retrieval": float(np.round(raop_days + later,
                                                                                6)),
        "requester_number_of_comments_at_request": n_com,
        "requester_number_of_comments_at_retrieval": n_com + int(rng.poisson(20)),
        "requester_number_of_comments_in_raop_at_request": int(rng.poisson(0.3)),
        "requester_number_of_comments_in_raop_at_retrieval": int(rng.poisson(1 + got)),
        "requester_number_of_posts_at_request": n_posts,
        "requester_number_of_posts_at_retrieval": n_posts + int(rng.poisson(5)),
        "requester_number_of_posts_on_raop_at_request": int(rng.poisson(0.05)),
        "requester_number_of_posts_on_raop_at_retrieval": 1 + int(rng.poisson(0.2)),
        "requester_number_of_subreddits_at_request": len(subs),
        "requester_received_pizza": got,
        "requester_subreddits_at_request": subs,
        "requester_upvotes_minus_downvotes_at_request": int(plus * rng.uniform(0.5, 1.0)),
        "requester_upvotes_minus_downvotes_at_retrieval": int(plus * rng.uniform(0.6, 1.0)) + 5,
        "requester_upvotes_plus_downvotes_at_request": plus,
        "requester_upvotes_plus_downvotes_at_retrieval": plus + int(rng.poisson(30)),
        "requester_user_flair": ("shroom" if rng.random() < 0.9 else "PIF") if got else None,
        "requester_username": user,
        "unix_timestamp_of_request": float(t),
        "unix_timestamp_of_request_utc": float(t - 3600 * 5),
    }
    return rec


def pizza(prepared: pathlib.Path, rng) -> C.Built:
    n_train, n_test = 1100, 300
    n = n_train + n_test
    d = docs(rng, n)
    ids = ["t3_" + s for s in C.b36_ids(rng, n, 5)]
    users = ["user_" + s for s in C.b36_ids(rng, n, 8)]
    recs = [_pizza_record(rng, d.iloc[k], ids[k], users[k]) for k in range(n)]
    train, test = recs[:n_train], recs[n_train:]
    pub, priv = prepared / "public", prepared / "private"
    C.write_json(train, pub / "train.json", indent=4)
    C.write_json([{k: r[k] for k in PIZZA_TEST_FIELDS} for r in test], pub / "test.json",
                 indent=4)
    C.zip_file(pub / "train.json", pub / "train.zip")
    C.zip_file(pub / "test.json", pub / "test.zip")
    answers = pd.DataFrame({"request_id": [r["request_id"] for r in test],
                            "requester_received_pizza": [int(r["requester_received_pizza"])
                                                         for r in test]})
    C.write_csv(answers, priv / "test.csv")
    C.write_csv(answers.assign(requester_received_pizza=0), pub / "sampleSubmission.csv")
    C.write_description(prepared, C.describe(
        title="Random acts of pizza",
        goal="Each record is a request for a free pizza posted on a forum, with the "
             "requester's activity at the time. Predict the probability that the request "
             "was fulfilled (`requester_received_pizza`).",
        metric="Area under the ROC curve (higher is better).",
        files={"train.json": "a list of records with every field, the outcome "
                             "`requester_received_pizza` (true/false) among them; fields "
                             "ending in `_at_retrieval` and `requester_user_flair` were "
                             "recorded later and are absent from the test records",
               "test.json": "the test records: only the fields known when the request was "
                            "posted",
               "train.zip, test.zip": "the same two JSON files, zipped",
               "sampleSubmission.csv": "a valid submission that predicts 0 everywhere"},
        submission="One row per test `request_id`, `requester_received_pizza` a probability.",
        header=["request_id", "requester_received_pizza"]))
    return C.Built(f"{n_train} train / {n_test} test", "docstrings + simulated user activity",
                   "success more likely for scipy text, older accounts, more comments and "
                   "docstrings with examples")


# ----------------------------------------------------------------------------- tweets

POSITIVE = ("love it", "so good", "great", "awesome", "happy", "thanks", "nice work",
            "wonderful", "best day", "fun", "glad", "amazing")
NEGATIVE = ("hate this", "so sad", "awful", "terrible", "annoying", "bad", "sucks",
            "broken again", "miss you", "sorry", "worst", "tired")


def tweets(prepared: pathlib.Path, rng) -> C.Built:
    n_train, n_test = 1400, 300
    n = n_train + n_test
    d = docs(rng, n, max_words=int(rng.integers(10, 14)))
    sentiment = rng.choice(["neutral", "positive", "negative"], size=n, p=[0.4, 0.31, 0.29])
    texts, spans = [], []
    for base, s in zip(d["text"], sentiment):
        words = base.split()[: int(rng.integers(6, 16))]
        if s == "neutral":
            text = " ".join(words)
            texts.append(text)
            spans.append(text)
            continue
        phrase = str(rng.choice(POSITIVE if s == "positive" else NEGATIVE))
        at = int(rng.integers(0, len(words) + 1))
        words = words[:at] + phrase.split() + words[at:]
        end = at + len(phrase.split())
        if rng.random() < 0.3 and end < len(words):
            end += 1                                   # the span runs one word on
        texts.append(" ".join(words))
        spans.append(" ".join(words[at:end]) if rng.random() > 0.08 else " ".join(words))
    df = pd.DataFrame({"textID": C.hex_ids(rng, n, 10), "text": texts, "selected_text": spans,
                       "sentiment": sentiment})
    train, test = df.iloc[:n_train], df.iloc[n_train:].reset_index(drop=True)
    pub, priv = prepared / "public", prepared / "private"
    C.write_csv(train, pub / "train.csv")
    C.write_csv(test, priv / "test.csv")
    C.write_csv(test.drop(columns=["selected_text"]), pub / "test.csv")
    C.write_csv(test[["textID"]].assign(selected_text=""), pub / "sample_submission.csv")
    C.write_description(prepared, C.describe(
        title="Tweet sentiment extraction",
        goal="Each short post comes with its sentiment (positive, negative or neutral). "
             "Predict the span of the post (`selected_text`: consecutive words copied from "
             "`text`) that carries that sentiment.",
        metric="Mean word-level Jaccard similarity between the predicted and the true span "
               "(higher is better).",
        files={"train.csv": "`textID`, `text`, `selected_text`, `sentiment`",
               "test.csv": "`textID`, `text`, `sentiment`",
               "sample_submission.csv": "the format, with empty spans (scores 0)"},
        submission="One row per test `textID` with the predicted `selected_text`.",
        header=["textID", "selected_text"]))
    return C.Built(f"{n_train} train / {n_test} test", "docstrings + inserted sentiment phrases",
                   "neutral: the whole text; positive/negative: the inserted sentiment phrase "
                   "(sometimes one word more)")


# ----------------------------------------------------------------------------- spooky

AUTHORS = {"EAP": "scipy", "HPL": "numpy", "MWS": "pandas"}


def spooky(prepared: pathlib.Path, rng) -> C.Built:
    counts = {"EAP": 720, "HPL": 540, "MWS": 540}
    parts = []
    for author, n in counts.items():
        parts.append(docs(rng, n, libs=[AUTHORS[author]]).assign(author=author))
    df = pd.concat(parts, ignore_index=True).iloc[rng.permutation(sum(counts.values()))]
    df = pd.DataFrame({"id": [f"id{k:05d}" for k in C.distinct_ints(rng, len(df), 0, 28000)],
                       "text": df["text"].to_numpy(), "author": df["author"].to_numpy()})
    tr, te = C.shuffled_split(len(df), 1 / 6, rng)
    train, test = df.iloc[tr], df.iloc[te].reset_index(drop=True)
    one_hot = pd.DataFrame({"id": test["id"],
                            **{a: (test["author"] == a).astype(int) for a in AUTHORS}})
    pub, priv = prepared / "public", prepared / "private"
    C.write_csv(train, pub / "train.csv")
    C.write_csv(test.drop(columns=["author"]), pub / "test.csv")
    C.write_csv(one_hot, priv / "test.csv")
    sample = one_hot.assign(EAP=0.403493538995863, HPL=0.287808366106543,
                            MWS=0.308698094897594)
    C.write_csv(sample, pub / "sample_submission.csv")
    C.write_description(prepared, C.describe(
        title="Spooky author identification",
        goal="Each row is a passage written by one of three authors (EAP, HPL, MWS). "
             "Predict, for each test passage, the probability of each author.",
        metric="Multi-class log loss (lower is better); each row's probabilities must sum "
               "to 1.",
        files={"train.csv": "`id`, `text`, `author`", "test.csv": "`id`, `text`",
               "sample_submission.csv": "the format, with the class frequencies as "
                                        "probabilities"},
        submission="One row per test `id`: exactly the columns below, `id` first.",
        header=["id", "EAP", "HPL", "MWS"]))
    return C.Built(f"{len(tr)} train / {len(te)} test", "docstrings (scipy / numpy / pandas)",
                   "author = the library the passage documents (scipy and numpy overlap)")


# ----------------------------------------------------------------------------- jigsaw

JIGSAW = ("toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate")
MARKERS = {"toxic": ("pathetic", "nonsense", "garbage", "ridiculous", "useless"),
           "severe_toxic": ("vile", "revolting", "despicable"),
           "obscene": ("damn", "crap", "bloody", "freaking"),
           "threat": ("watch your back", "you will regret this", "i will find you"),
           "insult": ("idiot", "moron", "clown", "loser"),
           "identity_hate": ("your kind", "those people", "go back home")}
SUB_RATES = {"severe_toxic": 0.15, "obscene": 0.5, "threat": 0.12, "insult": 0.45,
             "identity_hate": 0.15}


def _jigsaw_labels(rng, n: int) -> pd.DataFrame:
    lab = {"toxic": C.bernoulli(rng, np.full(n, 0.25))}
    for c, r in SUB_RATES.items():
        lab[c] = lab["toxic"] * C.bernoulli(rng, np.full(n, r))
    return pd.DataFrame(lab)[list(JIGSAW)]


def _with_markers(rng, text: str, row) -> str:
    words = text.split()
    inserts = [str(rng.choice(MARKERS[c])) for c in JIGSAW if row[c] and rng.random() < 0.85]
    if not row["toxic"] and rng.random() < 0.06:         # a marker in a clean comment
        inserts.append(str(rng.choice(MARKERS[str(rng.choice(JIGSAW))])))
    for m in inserts:
        at = int(rng.integers(0, len(words) + 1))
        words.insert(at, m)
    out = " ".join(words)
    return out.upper() if row["toxic"] and rng.random() < 0.1 else out


def jigsaw(prepared: pathlib.Path, rng) -> C.Built:
    n_train, n_test = 1500, 400
    n = n_train + n_test
    d = docs(rng, n, max_words=40)
    while True:
        lab = _jigsaw_labels(rng, n)
        scored = rng.random(n_test) > 0.35                 # Kaggle left some rows unscored
        test_lab = lab.iloc[n_train:][scored]
        if all(test_lab[c].nunique() == 2 for c in JIGSAW):
            break
    text = [_with_markers(rng, t, lab.iloc[k]) for k, t in enumerate(d["text"])]
    df = pd.concat([pd.DataFrame({"id": C.hex_ids(rng, n, 16), "comment_text": text}), lab],
                   axis=1)
    train, test = df.iloc[:n_train], df.iloc[n_train:].reset_index(drop=True)
    answers = test[["id", *JIGSAW]].copy()
    answers.loc[~scored, list(JIGSAW)] = -1
    pub, priv = prepared / "public", prepared / "private"
    C.write_csv(train, pub / "train.csv")
    C.write_csv(test[["id", "comment_text"]], pub / "test.csv")
    C.write_csv(test[["id"]].assign(**{c: 0.5 for c in JIGSAW}), pub / "sample_submission.csv")
    C.write_csv(answers, priv / "test.csv")
    C.write_description(prepared, C.describe(
        title="Toxic comment classification",
        goal="Each comment may carry any of six kinds of toxicity. Predict, for every test "
             "comment, the probability of each: toxic, severe_toxic, obscene, threat, "
             "insult, identity_hate.",
        metric="The mean over the six columns of the area under the ROC curve (higher is "
               "better). Some test rows are not scored.",
        files={"train.csv": "`id`, `comment_text` and the six 0/1 labels",
               "test.csv": "`id`, `comment_text`",
               "sample_submission.csv": "the format, with 0.5 everywhere"},
        submission="One row per test `id` with exactly the columns below.",
        header=["id", *JIGSAW]))
    return C.Built(f"{n_train} train / {n_test} test ({int(scored.sum())} scored)",
                   "docstrings + inserted marker words",
                   "each label has its marker words (85% recall, 6% of clean comments carry "
                   "one); sub-labels imply toxic")
