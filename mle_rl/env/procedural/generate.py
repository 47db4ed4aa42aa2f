"""Procedural tasks: many small MLE tasks from real tables, each a user task directory.

`make_task(table, rng)` turns one source table into a task: a target chosen from its
columns (a class column with 2-8 well-populated classes, one or two numeric columns with
many values), a kind (binary, multiclass, regression, multi-target regression) and a
metric fitting it (AUC, accuracy, binary or multi-class log loss, RMSE, MAE, RMSLE,
MCRMSE), a random subset of rows and features, column names in one of several styles,
an id column of one of several names and kinds, sometimes missing values, and a page
worded anew (`wording.py`). `generate(out_dir, n, seed)` writes `n` of them in the
`--task_dir` layout (`user_tasks.py`), so they load, list and grade like a user's own
tasks. Same seed, same tasks.
"""

from __future__ import annotations

import json
import pathlib
import random
import re
import shutil
from typing import Optional

import numpy as np
import pandas as pd

from mle_rl.env.procedural import sources, wording

KIND_METRICS = {"binary": ("auc", "auc", "accuracy", "binary_log_loss"),
                "multiclass": ("multiclass_log_loss", "multiclass_log_loss", "accuracy"),
                "regression": ("rmse", "rmse", "mae", "rmsle_column_mean"),
                "multireg": ("mcrmse", "rmsle_column_mean")}
KIND_WEIGHTS = {"binary": 0.3, "multiclass": 0.25, "regression": 0.3, "multireg": 0.15}
ID_NAMES = ("id", "id", "row_id", "Id", "ID", "sample_id", "record", "uid", "key")
TARGET_NAMES = {"binary": ("target", "label", "y", "outcome"),
                "multiclass": ("target", "class", "label", "category"),
                "regression": ("target", "y", "value", "response")}
MAX_ROWS, MAX_FEATURES = 3000, 30
TASK_PREFIX = "gen"


def _clean(name: str) -> str:
    s = re.sub(r"[^0-9A-Za-z_]+", "_", str(name)).strip("_") or "col"
    return s if not s[0].isdigit() else f"c_{s}"


def _style(names: list, style: str) -> list:
    if style == "anonymous":
        return [f"f_{i}" for i in range(len(names))]
    if style == "lower":
        out = [_clean(n).lower() for n in names]
    elif style == "camel":
        out = ["".join(p[:1].upper() + p[1:] for p in _clean(n).split("_")) for n in names]
    else:
        out = [_clean(n) for n in names]
    seen: dict = {}
    for i, n in enumerate(out):           # distinct names after cleaning
        seen[n] = seen.get(n, 0) + 1
        if seen[n] > 1:
            out[i] = f"{n}_{seen[n]}"
    return out


def _class_candidates(df: pd.DataFrame) -> list:
    out = []
    for c in df.columns:
        counts = df[c].dropna().astype(str).value_counts()
        if 2 <= len(counts) <= 8 and counts.min() >= max(8, 0.04 * len(df)):
            out.append(c)
    return out


def _numeric_candidates(df: pd.DataFrame) -> list:
    return [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])
            and df[c].nunique() >= 20 and df[c].notna().mean() > 0.8]


def _ids(rng: random.Random, n: int) -> np.ndarray:
    style = rng.choice(("range", "offset", "shuffled", "hex"))
    if style == "range":
        return np.arange(n)
    if style == "offset":
        return np.arange(n) + rng.choice((1, 100, 1000, 10_000))
    if style == "shuffled":
        return np.random.default_rng(rng.randrange(2**31)).permutation(n * 3)[:n] + 1
    r = np.random.default_rng(rng.randrange(2**31))
    return np.array([f"{v:08x}" for v in r.choice(16**8, size=n, replace=False)])


def _split(rng, y: Optional[pd.Series], n: int, frac: float):
    r = np.random.default_rng(rng.randrange(2**31))
    if y is None:
        perm = r.permutation(n)
        m = int(round(frac * n))
        return np.sort(perm[m:]), np.sort(perm[:m])
    test = []
    for label in sorted(y.astype(str).unique()):
        rows = r.permutation(np.flatnonzero(y.astype(str).to_numpy() == label))
        test += rows[: max(1, int(round(frac * len(rows))))].tolist()
    test = np.sort(np.array(test))
    return np.setdiff1d(np.arange(n), test), test


def make_task(table: sources.Table, rng: random.Random) -> Optional[dict]:
    """One task from `table`, or None when it has no usable target. Returns
    {"spec": task.json dict, "train", "test", "answers", "sample": DataFrames,
    "description": str, "kind": ..., "source": table.name}."""
    df = table.load()
    df = df.loc[:, df.nunique(dropna=True) > 1]
    if len(df) > MAX_ROWS:
        df = df.sample(MAX_ROWS, random_state=rng.randrange(2**31))
    df = df.reset_index(drop=True)
    cls, num = _class_candidates(df), _numeric_candidates(df)
    kinds = ([k for k in ("binary", "multiclass")
              if any((df[c].nunique() == 2) == (k == "binary") for c in cls)]
             + (["regression"] if num else []) + (["multireg"] if len(num) >= 3 else []))
    if not kinds:
        return None
    kind = rng.choices(kinds, weights=[KIND_WEIGHTS[k] for k in kinds])[0]
    metric = rng.choice(KIND_METRICS[kind])
    if kind in ("binary", "multiclass"):
        target_src = [rng.choice([c for c in cls if (df[c].nunique() == 2) == (kind == "binary")])]
    else:
        target_src = rng.sample(num, 2 if kind == "multireg" else 1)
    df = df.dropna(subset=target_src).reset_index(drop=True)
    if metric == "rmsle_column_mean" and (df[target_src] < 0).any().any():
        metric = "rmse" if kind == "regression" else "mcrmse"
    features = [c for c in df.columns if c not in target_src]
    rng.shuffle(features)
    features = features[: rng.randint(min(2, len(features)), min(MAX_FEATURES, len(features)))]
    keep = [c for c in table.keep if c in df.columns and c not in target_src]
    if keep:                         # the text column, wherever the shuffle put it
        features = keep + [c for c in features if c not in keep]
        rng.shuffle(features)
    if not features:
        return None
    names = _style(features + target_src, rng.choice(("keep", "keep", "lower", "camel",
                                                      "anonymous")))
    fnames, tnames = names[: len(features)], names[len(features):]
    if kind != "multireg" and rng.random() < 0.5:
        tnames = [rng.choice(TARGET_NAMES["regression" if kind == "regression" else kind])]
    id_col = rng.choice([n for n in ID_NAMES if n not in names])
    X = df[features].copy()
    X.columns = fnames
    if rng.random() < 0.3:                   # some missing values, as real tables have
        r = np.random.default_rng(rng.randrange(2**31))
        for c in rng.sample(fnames, max(1, len(fnames) // 3)):
            X.loc[r.random(len(X)) < rng.uniform(0.03, 0.15), c] = np.nan
    positive, classes = None, []
    if kind == "binary":
        labels = sorted(df[target_src[0]].astype(str).unique())
        pos = rng.choice(labels)
        positive = f"`{target_src[0]}` is {pos}"
        y = (df[target_src[0]].astype(str) == pos).astype(int)
        if metric == "accuracy" and rng.random() < 0.5:
            y = df[target_src[0]].astype(str).map(_clean)
    elif kind == "multiclass":
        y = df[target_src[0]].astype(str).map(_clean)
        classes = sorted(y.unique())
    else:
        y = df[target_src].astype(float)
    strat = y if kind in ("binary", "multiclass") else None
    tr, te = _split(rng, strat, len(df), rng.uniform(0.2, 0.35))
    ids = _ids(rng, len(df))
    frame = X.copy()
    frame.insert(0, id_col, ids)
    ycols = pd.DataFrame(np.asarray(y).reshape(len(df), -1), columns=tnames)
    train = pd.concat([frame.iloc[tr].reset_index(drop=True),
                       ycols.iloc[tr].reset_index(drop=True)], axis=1)
    test = frame.iloc[te].reset_index(drop=True)
    ans_y = ycols.iloc[te].reset_index(drop=True)
    answers = pd.concat([test[[id_col]], ans_y], axis=1)
    sample = test[[id_col]].copy()
    if metric == "multiclass_log_loss":
        prior = train[tnames[0]].value_counts(normalize=True)
        onehot = pd.get_dummies(ans_y[tnames[0]]).reindex(columns=classes, fill_value=0)
        answers = pd.concat([test[[id_col]], onehot.astype(int)], axis=1)
        for c in classes:
            sample[c] = round(float(prior.get(c, 0.0)), 6)
        sample[classes] = sample[classes].div(sample[classes].sum(axis=1), axis=0)
        targets = list(classes)
    elif metric in ("auc", "binary_log_loss"):
        sample[tnames[0]] = round(float(train[tnames[0]].mean()), 4)
        targets = tnames
    elif metric == "accuracy":
        sample[tnames[0]] = train[tnames[0]].mode()[0]
        targets = tnames
    else:
        for c in tnames:
            sample[c] = round(float(train[c].median() if metric == "mae" else train[c].mean()), 4)
        targets = tnames
    description = wording.describe(
        rng, title=table.title, about="", origin=table.origin, kind=kind, metric=metric,
        id_col=id_col, targets=tnames, features=fnames, n_train=len(train), n_test=len(test),
        sample=sample, positive=positive, classes=classes)
    spec = {"metric": metric, "id_column": id_col, "target_columns": list(targets)}
    return {"spec": spec, "train": train, "test": test, "answers": answers, "sample": sample,
            "description": description, "kind": kind, "source": table.name}


def write(task: dict, root: pathlib.Path) -> None:
    """Writes one made task as `root/task.json` + `root/prepared/{public,private}`."""
    public, private = root / "prepared" / "public", root / "prepared" / "private"
    public.mkdir(parents=True)
    private.mkdir(mode=0o700)
    (root / "task.json").write_text(json.dumps(task["spec"], indent=1))
    (public / "description.md").write_text(task["description"], encoding="utf-8")
    for name in ("train", "test"):          # an image layout may have neither table
        if task[name] is not None:
            task[name].to_csv(public / f"{name}.csv", index=False)
    for rel, data in task.get("files", {}).items():
        (public / rel).parent.mkdir(parents=True, exist_ok=True)
        (public / rel).write_bytes(data)
    task["sample"].to_csv(public / "sample_submission.csv", index=False)
    task["answers"].to_csv(private / "answers.csv", index=False)
    (root / "generated.json").write_text(json.dumps({"kind": task["kind"],
                                                     "source": task["source"]}))


def generate(out_dir, n: int, seed: int = 0, cache: Optional[pathlib.Path] = None,
             text_share: float = 0.0, image_share: float = 0.0) -> list:
    """Writes `n` tasks under `out_dir` (replacing what was there); returns their ids. A
    share `text_share` of them (drawn per task, from the seed) come from the text tables
    (`text_sources.py`: a free-text column beside numbers and categories), and a share
    `image_share` are picture tasks (`image_tasks.py`)."""
    from mle_rl.env.procedural import image_tasks
    from mle_rl.env import tasks as env_tasks
    from mle_rl.env.procedural import text_sources

    out_dir = pathlib.Path(out_dir)
    pool = list(sources.tables(pathlib.Path(cache or env_tasks.cache_dir())))
    rng = random.Random(seed)
    rng.shuffle(pool)
    texts = list(text_sources.tables()) if text_share > 0 else []
    random.Random(f"{seed}/text").shuffle(texts)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    ids, i = [], 0
    n_text = 0
    while len(ids) < n and i < 20 * n:
        if image_share > 0 and random.Random(f"{seed}/image/{len(ids)}").random() < image_share:
            i += 1
            task = image_tasks.make_task(random.Random(f"{seed}/{i}"))
            task_id = f"{TASK_PREFIX}-{len(ids):04d}-{task['source'].replace('/', '-')}"
            write(task, tmp / task_id)
            ids.append(task_id)
            continue
        if texts and random.Random(f"{seed}/text/{len(ids)}").random() < text_share:
            table = texts[n_text % len(texts)]
            n_text += 1
        else:
            table = pool[i % len(pool)]
        i += 1
        try:
            task = make_task(table, random.Random(f"{seed}/{i}"))
        except (ValueError, KeyError, TypeError):   # a table too odd to use; skip it
            task = None
        if task is None:
            continue
        task_id = f"{TASK_PREFIX}-{len(ids):04d}-{_clean(table.name.split('/')[-1]).lower()}"
        write(task, tmp / task_id)
        ids.append(task_id)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return ids


MARKER = "generator.json"


def source_hash() -> str:
    import hashlib

    d = hashlib.sha256()
    for f in sorted(pathlib.Path(__file__).parent.glob("*.py")):
        d.update(f.name.encode() + f.read_bytes())
    return d.hexdigest()[:16]


def ensure(out_dir, n: int, seed: int = 0, cache: Optional[pathlib.Path] = None,
           log=print, text_share: float = 0.0, image_share: float = 0.0) -> list:
    """The first `n` generated tasks under `out_dir`, generated (again) only when the
    directory holds fewer, another seed or another generator's tasks. Task k is the same
    whatever `n`, so one directory serves every n up to the largest asked for."""
    out_dir = pathlib.Path(out_dir)
    want = {"seed": seed, "source": source_hash(), "text_share": text_share,
            "image_share": image_share}
    try:
        have = json.loads((out_dir / MARKER).read_text())
    except (OSError, ValueError):
        have = {}
    if {k: have.get(k) for k in want} == want and len(have.get("ids", ())) >= n:
        return have["ids"][:n]
    log(f"generating {n} procedural tasks into {out_dir}")
    ids = generate(out_dir, n, seed, cache, text_share=text_share, image_share=image_share)
    (out_dir / MARKER).write_text(json.dumps({**want, "ids": ids}, indent=1))
    return ids


def main(argv=None) -> int:
    """`python -m mle_rl.env.procedural.generate [N] [--seed S] [--out DIR]`: writes N tasks
    (default 50) into DIR (default: the cache's generated_tasks, which every task lookup
    searches), printing their ids; train on them with `--tasks=gen-0000-...,...`."""
    import argparse

    from mle_rl.env import tasks as env_tasks

    ap = argparse.ArgumentParser(prog="python -m mle_rl.env.procedural.generate")
    ap.add_argument("n", nargs="?", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("N must be >= 1")
    out = pathlib.Path(args.out) if args.out else env_tasks.generated_dir()
    print("\n".join(ensure(out, args.n, args.seed, log=lambda m: None)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
