"""Held-out text tasks from a source the project never trains, tunes or evaluates on
otherwise: Debian's package descriptions (`apt-cache dumpavail`, or the installed
packages' /var/lib/dpkg/status where apt has no lists).

  heldout-debian-section  a package's description (synopsis and long text) and its
                          installed size -> its archive section, 6 classes, multi-class
                          log loss
  heldout-debian-topic    the description alone -> one of four sections named in words
                          (networking, administration, utilities, science), accuracy

No corpus program, SFT example, tokenizer text or procedural task reads apt's data
(`text_sources.py` uses docstrings only), and these pages are worded here by hand. The
data is whatever the machine's package lists hold (the description states how many
packages and which releases), so figures move a little from machine to machine.

    python -m mle_rl.env.procedural.heldout_text DIR     # writes DIR/<id>/ for the two
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd

from mle_rl.env.builtin.writer import split_ids
from mle_rl.env.procedural import generate

SEED = 13
TASKS = ("heldout-debian-section", "heldout-debian-topic")
SECTIONS = ("libs", "python", "perl", "utils", "net", "science")
TOPICS = {"net": "networking", "admin": "administration", "utils": "utilities",
          "science": "science"}
MIN_PER_CLASS, PER_CLASS = 40, 500


def _stanzas(text: str):
    for block in re.split(r"\n\s*\n", text):
        fields, key = {}, None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Package"):
            yield fields


def packages() -> pd.DataFrame:
    """One row per package with a description: package, section, installed size (KiB),
    description (the synopsis and the long text on one line, list markers and the '.'
    paragraph separators dropped)."""
    try:
        text = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True,
                              timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    if text.count("\nPackage:") < 2000:
        try:
            text = pathlib.Path("/var/lib/dpkg/status").read_text(errors="replace")
        except OSError:
            text = ""
    rows = {}
    for f in _stanzas(text):
        desc = f.get("Description", "")
        section = f.get("Section", "").split("/")[-1]
        if not desc or not section or f["Package"] in rows:
            continue
        words = " ".join(w for w in desc.replace("\n.\n", "\n").split() if w not in (".", "*", "-"))
        rows[f["Package"]] = {"package": f["Package"], "section": section,
                              "installed_kib": pd.to_numeric(f.get("Installed-Size"), errors="coerce"),
                              "description": words}
    df = pd.DataFrame(list(rows.values()))
    if df.empty:
        raise FileNotFoundError("No Debian package descriptions: neither `apt-cache dumpavail` "
                                "nor /var/lib/dpkg/status has any (run `apt-get update`).")
    return df.drop_duplicates("description").reset_index(drop=True)


def _pick(df: pd.DataFrame, sections, rng) -> pd.DataFrame:
    parts = []
    for s in sections:
        rows = df[df["section"] == s]
        if len(rows) < MIN_PER_CLASS:
            raise ValueError(f"Only {len(rows)} packages in section {s!r} here (need "
                             f"{MIN_PER_CLASS}); run `apt-get update` for the full lists.")
        parts.append(rows.iloc[np.sort(rng.permutation(len(rows))[:PER_CLASS])])
    return pd.concat(parts, ignore_index=True)


def _section(df: pd.DataFrame, note: str):
    rng = np.random.default_rng(SEED)
    d = _pick(df, SECTIONS, rng)
    d = d.iloc[rng.permutation(len(d))].reset_index(drop=True)
    d.insert(0, "pkg_id", [f"p{k:05d}" for k in range(len(d))])
    d = d[["pkg_id", "description", "installed_kib", "section"]]
    tr, te = split_ids(len(d), 0.3, SEED, stratify=d["section"].to_numpy())
    train, test = d.iloc[tr], d.iloc[te]
    prior = train["section"].value_counts(normalize=True)
    sample = test[["pkg_id"]].copy()
    for s in SECTIONS:
        sample[s] = round(float(prior.get(s, 0.0)), 6)
    answers = test[["pkg_id"]].copy()
    for s in SECTIONS:
        answers[s] = (test["section"] == s).astype(int).to_numpy()
    desc = f"""# Which shelf does this package belong on?

A software distribution files each of its packages under an archive section. Given what a
package says about itself (a one-line synopsis followed by a longer paragraph) and how
much disk space it takes once installed (`installed_kib`, in KiB), tell which of six
sections it was filed under: {", ".join(SECTIONS)}.

train.csv holds packages with their `section`; test.csv holds others without it. Each row
has an identifier `pkg_id`.

Scoring: the multi-class logarithmic loss of your probabilities (lower is better). Write
submission.csv with `pkg_id` and one probability column per section, named exactly
{", ".join(SECTIONS)}, as sample_submission.csv shows.

{note}
"""
    spec = {"metric": "multiclass_log_loss", "id_column": "pkg_id",
            "target_columns": list(SECTIONS)}
    return spec, train, test.drop(columns="section"), answers, sample, desc


def _topic(df: pd.DataFrame, note: str):
    rng = np.random.default_rng(SEED + 1)
    d = _pick(df, tuple(TOPICS), rng)
    d = d.iloc[rng.permutation(len(d))].reset_index(drop=True)
    d["area"] = d["section"].map(TOPICS)
    d.insert(0, "entry", np.arange(5001, 5001 + len(d)))
    d = d[["entry", "description", "area"]]
    tr, te = split_ids(len(d), 0.3, SEED, stratify=d["area"].to_numpy())
    train, test = d.iloc[tr], d.iloc[te]
    sample = test[["entry"]].assign(area=train["area"].mode()[0])
    desc = f"""# Sorting software by what it is for

Every entry below is the self-description of a software package. Read it and name the
area the package serves: {", ".join(TOPICS.values())}. The column `area` gives it for the
entries of train.csv; guess it for every `entry` of test.csv.

We count the share of test entries whose area you name correctly (accuracy; higher is
better). The file you hand in has the columns `entry,area`, one row per test entry.

{note}
"""
    spec = {"metric": "accuracy", "id_column": "entry", "target_columns": ["area"]}
    return spec, train, test.drop(columns="area"), test[["entry", "area"]], sample, desc


def write_all(out_dir) -> list:
    """Writes the two held-out text tasks under `out_dir` (replacing them); their ids."""
    df = packages()
    note = (f"(Built from the {len(df)} package descriptions this machine's package lists "
            f"hold; another machine's lists may differ slightly.)")
    out_dir = pathlib.Path(out_dir)
    for task_id, build in zip(TASKS, (_section, _topic)):
        spec, train, test, answers, sample, desc = build(df, note)
        dest = out_dir / task_id
        shutil.rmtree(dest, ignore_errors=True)
        generate.write({"spec": spec, "train": train, "test": test, "answers": answers,
                        "sample": sample, "description": desc, "kind": "held-out",
                        "source": task_id}, dest)
    return list(TASKS)


if __name__ == "__main__":
    print("\n".join(write_all(sys.argv[1] if len(sys.argv) > 1 else "heldout_text_tasks")))
