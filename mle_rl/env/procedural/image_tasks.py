"""Procedural image tasks: pictures drawn from data that ships in packages, written in the
layouts image competitions use, so that the generic programs' image decision has tasks to
learn from that differ in everything but what matters.

A *scene* draws one picture and what it shows:
  digit   a handwritten digit of scikit-learn's `load_digits`, scaled, turned and coloured,
          on a crop of one of its two sample photographs; the label is the digit
  shape   a circle, square, triangle or cross drawn with Pillow on a tinted, noisy
          background; the label is the shape, and its size (pixels) a number to predict
  count   1 to 6 blobs scattered on a background; the label or the number is the count
A task takes one scene, a kind (binary: one label against the rest, or two labels;
multi-class; regression where the scene has a number), a metric fitting it, 240-900
pictures of 16-48 pixels, grey or colour, PNG or JPEG, and a *layout*:
  table     train.csv / test.csv name each picture by id (with or without its extension)
            in one folder (`images/`, `imgs/`, `pictures/`)
  split     the same, with the pictures in `train/` and `test/`
  zipped    train.csv names files inside `train.zip` (and `test.zip`); no test.csv: the
            sample submission lists the test files
  named     no table at all: `train/<label>.<n>.<ext>` and `test/<n>.<ext>`
  bands     JSON records holding each picture as lists of numbers per channel (not 0-255),
            sometimes inside a .7z archive
  features  the table layout with a few numeric columns beside the ids (some informative)
Column names, id styles and the page's wording vary; answers and the sample submission
follow `generate.py`'s conventions, so these load and grade like the other generated tasks.
"""

from __future__ import annotations

import io
import json
import random
from typing import Optional

import numpy as np
import pandas as pd

from mle_rl.env.procedural import wording

SCENES = ("digit", "shape", "count")
LAYOUTS = ("table", "split", "zipped", "named", "bands", "features")
SHAPES = ("circle", "square", "triangle", "cross")
ID_COLS = ("id", "image_id", "image", "file", "filename", "img", "name")
LABEL_COLS = ("label", "class", "target", "category", "y")
METRICS = {"binary": ("auc", "binary_log_loss", "accuracy"),
           "multiclass": ("multiclass_log_loss", "multiclass_log_loss", "accuracy"),
           "regression": ("rmse", "mae")}


def _digits():
    from mle_rl.env.standins.images import _digits as load
    return load()


def _background(rng: np.random.Generator, side: int) -> np.ndarray:
    from mle_rl.env.standins.images import background
    tint = rng.uniform(0, 255, 3) if rng.random() < 0.7 else None
    return background(rng, (side, side), tint=tint, mix=float(rng.uniform(0.4, 0.85)))


def _ink(rng, canvas: np.ndarray) -> np.ndarray:
    """A colour that stands out from the canvas (dark on light, light on dark)."""
    light = float(canvas.mean()) > 128
    return rng.uniform(0, 70, 3) if light else rng.uniform(185, 255, 3)


def _digit(rng, side: int, label: int) -> np.ndarray:
    from mle_rl.env.standins.images import paste, sprite
    images, target = _digits()
    pool = np.flatnonzero(target == label)
    canvas = _background(rng, side)
    s = int(side * rng.uniform(0.7, 0.95))
    mask = sprite(images[int(rng.choice(pool))], s, float(rng.uniform(-20, 20)))
    paste(canvas, mask, _ink(rng, canvas), int(rng.integers(0, side - s + 1)),
          int(rng.integers(0, side - s + 1)))
    return canvas


def _shape(rng, side: int, label: str, size: int) -> np.ndarray:
    from PIL import Image, ImageDraw
    canvas = _background(rng, side)
    im = Image.fromarray(canvas.astype(np.uint8))
    d = ImageDraw.Draw(im)
    cy, cx = (int(rng.integers(size, side - size + 1)) for _ in range(2))
    colour = tuple(int(v) for v in _ink(rng, canvas))
    if label == "circle":
        d.ellipse([cx - size, cy - size, cx + size, cy + size], fill=colour)
    elif label == "square":
        d.rectangle([cx - size, cy - size, cx + size, cy + size], fill=colour)
    elif label == "triangle":
        d.polygon([(cx, cy - size), (cx - size, cy + size), (cx + size, cy + size)], fill=colour)
    else:
        w = max(1, size // 3)
        d.rectangle([cx - size, cy - w, cx + size, cy + w], fill=colour)
        d.rectangle([cx - w, cy - size, cx + w, cy + size], fill=colour)
    return np.asarray(im, dtype=np.float32)


def _count(rng, side: int, n: int) -> np.ndarray:
    from PIL import Image, ImageDraw
    canvas = _background(rng, side)
    im = Image.fromarray(canvas.astype(np.uint8))
    d = ImageDraw.Draw(im)
    r = max(2, side // 9)
    colour = tuple(int(v) for v in _ink(rng, canvas))
    for _ in range(n):
        y, x = (int(rng.integers(r, side - r)) for _ in range(2))
        d.ellipse([x - r, y - r, x + r, y + r], fill=colour)
    return np.asarray(im, dtype=np.float32)


def _draw(scene: str, kind: str, n: int, side: int, rng) -> tuple[list, list, str]:
    """n pictures of `scene` -> (pictures as float [side, side, 3], labels, what they are)."""
    if scene == "digit":
        labels = list(rng.choice(10, size=int(rng.integers(2, 7)), replace=False))
        y = [int(labels[k]) for k in rng.integers(0, len(labels), n)]
        return [_digit(rng, side, v) for v in y], y, "the handwritten digit in the picture"
    if scene == "shape":
        names = list(rng.choice(SHAPES, size=int(rng.integers(2, 5)), replace=False))
        y = [str(names[k]) for k in rng.integers(0, len(names), n)]
        sizes = [int(rng.integers(max(2, side // 8), side // 3 + 1)) for _ in range(n)]
        pics = [_shape(rng, side, v, s) for v, s in zip(y, sizes)]
        if kind == "regression":
            return pics, sizes, "the size of the shape (half its width, in pixels)"
        return pics, y, "the shape drawn in the picture"
    y = [int(v) for v in rng.integers(1, 7, n)]
    return [_count(rng, side, v) for v in y], y, "how many dots the picture shows"


def _finish(pic: np.ndarray, rng, grey: bool) -> np.ndarray:
    out = np.clip(pic + rng.normal(0, 6, pic.shape), 0, 255).astype(np.uint8)
    return out.mean(axis=2).astype(np.uint8) if grey else out


def _encode(pic: np.ndarray, ext: str) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(pic).save(buf, format="PNG" if ext == ".png" else "JPEG", quality=90)
    return buf.getvalue()


def _zip(members: dict) -> bytes:
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(members):
            z.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), members[name])
    return buf.getvalue()


def _sevenz(name: str, data: bytes) -> bytes:
    import pathlib
    import tempfile

    from mle_rl.env.standins import common
    with tempfile.TemporaryDirectory() as tmp:
        dest = pathlib.Path(tmp) / "a.7z"
        common.sevenz({name: data}, dest)
        return dest.read_bytes()


def make_task(rng: random.Random) -> Optional[dict]:
    """One image task: {"spec", "train", "test" (DataFrames, None where the layout has no
    such table), "answers", "sample", "description", "kind", "source", "files" ({path under
    public/: bytes})}."""
    g = np.random.default_rng(rng.randrange(2**31))
    scene = rng.choice(SCENES)
    kinds = ["binary", "multiclass"] + (["regression"] if scene in ("shape", "count") else [])
    kind = rng.choice(kinds)
    layout = rng.choice(LAYOUTS if kind != "regression" else
                        tuple(x for x in LAYOUTS if x != "named"))
    metric = rng.choice(METRICS[kind]) if not (layout == "named" and kind == "binary") else \
        "accuracy"              # labels in file names: which one is "positive" is not said
    n, side = rng.randint(240, 900), rng.choice((16, 20, 24, 32, 40, 48))
    grey, ext = rng.random() < 0.3, rng.choice((".png", ".jpg"))
    pics, y, what = _draw(scene, kind, n, side, g)
    pics = [_finish(p, g, grey) for p in pics]
    y = pd.Series(y)
    positive = None
    if kind == "binary":
        values = sorted(set(y.astype(str)))
        pos = rng.choice(values)
        positive = f"the picture shows {pos}"
        if layout == "named" or (metric == "accuracy" and rng.random() < 0.5):
            y = y.astype(str).map(lambda v, p=pos: p if v == p else "other")
        else:
            y = (y.astype(str) == pos).astype(int)
    elif kind == "multiclass":
        y = y.astype(str).map(lambda v: f"c{v}" if v[:1].isdigit() else v)
    test_idx = np.sort(g.choice(n, size=int(n * rng.uniform(0.2, 0.35)), replace=False))
    is_test = np.zeros(n, bool)
    is_test[test_idx] = True
    id_col = rng.choice(ID_COLS) if layout != "named" else "id"
    tname = rng.choice(LABEL_COLS)
    if layout == "named":
        stems = [f"{y[k]}.{k}" if not is_test[k] else str(1 + int(np.sum(is_test[:k])))
                 for k in range(n)]
    elif rng.random() < 0.5:
        stems = [f"{k:05d}" for k in g.permutation(100000)[:n]]
    else:
        stems = ["".join(g.choice(list("0123456789abcdef"), 10)) for _ in range(n)]
    with_ext = layout in ("zipped", "named") or rng.random() < 0.4
    ids = [s + ext if with_ext and layout != "named" else s for s in stems]
    if layout == "named":
        ids = [stems[k] + ext if not is_test[k] else int(stems[k]) for k in range(n)]
    files: dict = {}
    folder = rng.choice(("images", "imgs", "pictures"))
    for k in range(n):
        name = stems[k] + ext
        if layout in ("table", "features"):
            files[f"{folder}/{name}"] = _encode(pics[k], ext)
        elif layout in ("split", "named"):
            files[f"{'test' if is_test[k] else 'train'}/{name}"] = _encode(pics[k], ext)
    if layout == "zipped":
        for part, on in (("train", False), ("test", True)):
            files[f"{part}.zip"] = _zip({stems[k] + ext: _encode(pics[k], ext)
                                         for k in range(n) if is_test[k] == on})
    frame = pd.DataFrame({id_col: ids})
    if layout == "features":
        brightness = [float(p.mean()) for p in pics]
        frame["brightness"] = np.round(np.asarray(brightness) + g.normal(0, 5, n), 2)
        for j in range(rng.randint(1, 4)):
            frame[f"f_{j}"] = np.round(g.normal(0, 1, n), 3)
    frame[tname] = y.to_numpy()
    train, test = frame[~is_test].reset_index(drop=True), frame[is_test].reset_index(drop=True)
    answers = test[[id_col, tname]].reset_index(drop=True)
    test = test.drop(columns=[tname])
    sample = test[[id_col]].copy()
    targets = [tname]
    if metric == "multiclass_log_loss":
        classes = sorted(train[tname].unique())
        prior = train[tname].value_counts(normalize=True)
        onehot = pd.get_dummies(answers[tname]).reindex(columns=classes, fill_value=0)
        answers = pd.concat([answers[[id_col]], onehot.astype(int)], axis=1)
        for c in classes:
            sample[c] = round(float(prior.get(c, 0.0)), 6)
        targets = list(classes)
    elif metric in ("auc", "binary_log_loss"):
        sample[tname] = round(float(train[tname].mean()), 4)
    elif metric == "accuracy":
        sample[tname] = train[tname].mode()[0]
    else:
        sample[tname] = round(float(train[tname].median() if metric == "mae"
                                    else train[tname].mean()), 4)
    if layout == "bands":
        def records(df, rows):
            out = []
            for (_, r), k in zip(df.iterrows(), rows):
                a = pics[k].astype(np.float32)
                a = a[:, :, None] if a.ndim == 2 else a
                rec = {c: (r[c].item() if hasattr(r[c], "item") else r[c]) for c in df.columns}
                for b in range(a.shape[2]):
                    rec[f"band_{b + 1}"] = [round(float(v) / 25.5 - 5.0, 3)
                                            for v in a[:, :, b].ravel()]
                out.append(rec)
            return json.dumps(out).encode()
        packed = rng.random() < 0.5
        for part, df, rows in (("train", train, np.flatnonzero(~is_test)),
                               ("test", test, np.flatnonzero(is_test))):
            data = records(df, rows)
            if packed:
                files[f"{part}.json.7z"] = _sevenz(f"{part}.json", data)
            else:
                files[f"{part}.json"] = data
    keep_train = layout not in ("named", "bands")
    keep_test = layout not in ("named", "bands", "zipped")
    description = _describe(rng, layout=layout, folder=folder, ext=ext, what=what, kind=kind,
                            metric=metric, id_col=id_col, tname=tname, n_train=len(train),
                            n_test=len(test), sample=sample, positive=positive,
                            side=side, grey=grey)
    spec = {"metric": metric, "id_column": id_col, "target_columns": targets}
    return {"spec": spec, "train": train if keep_train else None,
            "test": test if keep_test else None, "answers": answers, "sample": sample,
            "description": description, "kind": kind, "source": f"images/{scene}/{layout}",
            "files": files}


def _describe(rng, *, layout, folder, ext, what, kind, metric, id_col, tname, n_train,
              n_test, sample, positive, side, grey) -> str:
    colour = "greyscale" if grey else "colour"
    files = {
        "table": [f"`train.csv`: {n_train} rows, `{id_col}` naming a picture in `{folder}/` "
                  f"and `{tname}`", f"`test.csv`: {n_test} rows, `{id_col}` only",
                  f"`{folder}/`: the pictures ({side}x{side} {colour}, `{ext}`)"],
        "split": [f"`train.csv` ({n_train} rows: `{id_col}`, `{tname}`) and `test.csv` "
                  f"({n_test} rows: `{id_col}`)",
                  f"`train/` and `test/`: the pictures ({side}x{side} {colour}, `{ext}`)"],
        "zipped": [f"`train.csv`: `{id_col}` (a file name inside `train.zip`) and `{tname}`",
                   "`train.zip`, `test.zip`: the pictures; the test files are the rows of "
                   "the sample submission"],
        "named": [f"`train/`: {n_train} pictures named `<{tname}>.<n>{ext}`",
                  f"`test/`: {n_test} pictures named `<id>{ext}`"],
        "bands": ["`train.json` / `test.json` (perhaps inside `.7z` archives): records with "
                  f"`{id_col}`, the pixels of each channel as `band_1`, `band_2`, ... "
                  f"({side}x{side}, row by row, rescaled)" + (f" and `{tname}`")],
        "features": [f"`train.csv` / `test.csv`: `{id_col}` (a picture in `{folder}/`), a few "
                     f"numeric measurements, and in train `{tname}`",
                     f"`{folder}/`: the pictures ({side}x{side} {colour})"],
    }[layout]
    target = {"binary": f"whether {positive}" if positive else "a yes/no label",
              "multiclass": what, "regression": what}[kind]
    overview = wording._pick(rng, (
        f"Each example is a small picture; predict {target} (`{tname}`).",
        f"A set of {side}-pixel pictures. The goal: {target}.",
        f"Pictures, one per row. You must work out {target}."))
    data = "\n".join([wording._pick(rng, ("Files in `./input/`:", "The input directory holds:")),
                      *[f"* {f}" for f in files],
                      "* a sample submission in the expected format."])
    evaluation = " ".join([wording._pick(rng, ("Submissions are evaluated on", "The score is")),
                           wording._pick(rng, wording.METRIC_PHRASES[metric]) + ".",
                           "Lower is better." if wording.LOWER[metric] else "Higher is better."])
    example = sample.head(3).to_csv(index=False, float_format="%.4g").strip()
    submission = (f"One row per test picture (`{id_col}`), with the columns of the sample:\n"
                  f"```\n{example}\n...\n```")
    heading, title_fmt = wording._pick(rng, wording.HEADINGS)
    parts = [title_fmt.format(wording._pick(rng, ("Picture task", "Image classification",
                                                  "What is in the picture?")))]
    for name, text in (("overview", overview), ("data", data), ("evaluation", evaluation),
                       ("submission", submission)):
        parts += [heading.format(wording._pick(rng, wording.NAMES[name])), text]
    return "\n\n".join(parts) + "\n"
