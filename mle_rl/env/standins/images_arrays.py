"""Image stand-ins that also ship numbers or pixels: leaf-classification (silhouettes plus
pre-extracted margin / shape / texture features), denoising-dirty-documents (PNG pages, the
answers one row per pixel) and statoil-iceberg-classifier-challenge (radar bands as JSON
lists inside .7z archives).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from mle_rl.env.standins import common as C
from mle_rl.env.standins.images import _digits, background, sprite

# ----------------------------------------------------------------------------- leaf

# Ten of the 99 species (one per digit), in the alphabetical order of MLE-bench's CLASSES.
SPECIES = ("Acer_Opalus", "Alnus_Rubra", "Betula_Pendula", "Cornus_Chinensis",
           "Fagus_Sylvatica", "Ginkgo_Biloba", "Ilex_Aquifolium", "Magnolia_Heptapeta",
           "Quercus_Rubra", "Tilia_Oliveri")


def _silhouette(rng, digit: np.ndarray) -> np.ndarray:
    mask = sprite(digit, 56, float(rng.normal(0, 20)))
    img = np.zeros((64, 64), np.float32)
    y, x = rng.integers(0, 9, 2)
    img[y:y + 56, x:x + 56] = mask
    return (img > 0.35).astype(np.uint8) * 255


def _features(rng, digit: np.ndarray, sil: np.ndarray, texture_bias: np.ndarray) -> list:
    margin = digit.ravel() + rng.gamma(0.5, 0.08, 64)
    ys, xs = np.nonzero(sil)
    cy, cx = ys.mean(), xs.mean()
    ang = np.arctan2(ys - cy, xs - cx)
    dist = np.hypot(ys - cy, xs - cx)
    bins = ((ang + np.pi) / (2 * np.pi) * 64).astype(int) % 64
    shape = np.zeros(64)
    np.maximum.at(shape, bins, dist)
    texture = rng.dirichlet(np.ones(64) * 0.6 + texture_bias)
    return [*(margin / margin.sum()).round(6), *(shape / shape.sum() / 50).round(7),
            *texture.round(6)]


def leaf(prepared: pathlib.Path, rng) -> C.Built:
    images, target = _digits()
    per = 48
    n = per * len(SPECIES)
    biases = rng.gamma(0.6, 0.4, (len(SPECIES), 64))
    classes = np.repeat(np.arange(len(SPECIES)), per)[rng.permutation(n)]
    ids = C.distinct_ints(rng, n, 1, 1600)
    pub, priv = prepared / "public", prepared / "private"
    rows = []
    for k in range(n):
        digit = images[int(rng.choice(np.flatnonzero(target == classes[k])))]
        sil = _silhouette(rng, digit)
        C.save_jpg(sil, pub / "images" / f"{ids[k]}.jpg")
        rows.append([int(ids[k]), SPECIES[classes[k]],
                     *_features(rng, digit, sil, biases[classes[k]])])
    cols = ["id", "species"] + [f"{f}{j}" for f in ("margin", "shape", "texture")
                                for j in range(1, 65)]
    df = pd.DataFrame(rows, columns=cols)
    tr, te = C.shuffled_split(n, 0.15, rng)
    train, test = df.iloc[tr], df.iloc[te].reset_index(drop=True)
    answers = pd.DataFrame({"id": test["id"], **{s: (test["species"] == s).astype(int)
                                                 for s in SPECIES}})
    C.write_csv(train, pub / "train.csv")
    C.write_csv(answers, priv / "test.csv")
    C.write_csv(test.drop(columns=["species"]), pub / "test.csv")
    C.write_csv(answers.assign(**{s: 1 / len(SPECIES) for s in SPECIES}),
                pub / "sample_submission.csv")
    C.write_description(prepared, C.describe(
        title="Leaf classification",
        goal=f"Each leaf belongs to one of {len(SPECIES)} species. From its binary "
             "silhouette and 192 pre-extracted features, predict the probability of each "
             "species.",
        metric="Multi-class log loss (lower is better); each row must sum to 1.",
        files={"images/": "`<id>.jpg`: 64x64 binary silhouettes of every leaf, train and "
                          "test",
               "train.csv": "`id`, `species`, `margin1`..`margin64`, `shape1`..`shape64`, "
                            "`texture1`..`texture64`",
               "test.csv": "`id` and the 192 features",
               "sample_submission.csv": "the format: `id` then one column per species, "
                                        "uniform probabilities"},
        submission="One row per test `id` with exactly the columns of sample_submission.csv "
                   "(`id` and every species), probabilities summing to 1.",
        header=["id", *SPECIES]))
    return C.Built(f"{len(tr)} train / {len(te)} test ({n} silhouettes, {len(SPECIES)} "
                   "species)", "digits as leaf silhouettes",
                   "species = digit class: margin = the noisy 8x8 digit, shape = the "
                   "silhouette's radial profile, texture = a weak per-species bias")


# ----------------------------------------------------------------------------- denoising


def _page(rng, words: list[str], size=(96, 64)) -> np.ndarray:
    """A clean page: dark text lines on white, size (w, h)."""
    page = Image.new("L", size, 255)
    draw = ImageDraw.Draw(page)
    font = ImageFont.load_default()
    y, k = 2, 0
    while y < size[1] - 10:
        line = " ".join(words[k:k + 4])
        k += 4
        draw.text((2 + int(rng.integers(0, 4)), y), line, fill=int(rng.integers(0, 40)),
                  font=font)
        y += int(rng.integers(11, 14))
    return np.asarray(page, np.float32)


def _dirty(rng, clean: np.ndarray) -> np.ndarray:
    h, w = clean.shape
    bg = background(rng, (h, w)).mean(axis=2)
    bg = 150 + 90 * (bg - bg.min()) / (np.ptp(bg) + 1e-6)
    stains = Image.new("L", (w, h), 0)
    draw = ImageDraw.Draw(stains)
    for _ in range(int(rng.integers(1, 4))):
        x, y, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(6, 20)
        draw.ellipse([x - r, y - r, x + r, y + r], outline=int(rng.integers(60, 120)),
                     width=int(rng.integers(2, 5)))
    stain = np.asarray(stains.filter(ImageFilter.GaussianBlur(2)), np.float32)
    out = np.minimum(bg - stain, clean + rng.uniform(10, 40))
    return np.clip(out + rng.normal(0, 10, out.shape), 0, 255)


def denoising(prepared: pathlib.Path, rng) -> C.Built:
    from mle_rl.env.standins.text import docs

    words = " ".join(docs(rng, 80)["text"]).split()
    names = sorted(C.distinct_ints(rng, 16, 1, 217).tolist())
    test_names = set(rng.choice(names, size=4, replace=False).tolist())
    pub, priv = prepared / "public", prepared / "private"
    cleaned = {}
    for j, name in enumerate(names):
        clean = _page(rng, words[j * 40:])
        part = "test" if name in test_names else "train"
        C.save_png(_dirty(rng, clean), pub / part / f"{name}.png")
        if part == "train":
            C.save_png(clean, pub / "train_cleaned" / f"{name}.png")
        else:
            cleaned[name] = clean.astype(np.uint8)
    frames = []
    for name in sorted(cleaned, key=lambda v: f"{v}.png"):    # sorted paths, as prepare.py
        arr = cleaned[name] / 255.0
        rows, cols = np.indices(arr.shape)
        frames.append(pd.DataFrame({"id": [f"{name}_{r + 1}_{c + 1}" for r, c in
                                           zip(rows.ravel(), cols.ravel())],
                                    "value": arr.ravel()}))
    answers = pd.concat(frames, ignore_index=True)
    C.write_csv(answers, priv / "answers.csv")
    C.write_csv(answers.assign(value=1), pub / "sampleSubmission.csv")
    C.write_description(prepared, C.describe(
        title="Denoising dirty documents",
        goal="Scanned pages carry stains, shading and noise. Predict the clean grey level "
             "(0 = black, 1 = white) of every pixel of the test pages.",
        metric="Root mean squared error over all pixels (lower is better).",
        files={"train/": "noisy training pages `<n>.png` (96x64 grey)",
               "train_cleaned/": "the clean version of each training page, same names",
               "test/": "noisy test pages",
               "sampleSubmission.csv": "one row per test pixel, id `<image>_<row>_<col>` "
                                       "(1-based), value 1 everywhere"},
        submission="One row per pixel of every test page, `value` in [0, 1].",
        header=["id", "value"]))
    return C.Built(f"{len(names) - 4} train / 4 test pages ({len(answers)} test pixels)",
                   "docstring words rendered with Pillow's default font",
                   "text pixels stay dark under the stains; background is bright and "
                   "smooth: a per-pixel or local filter recovers the page")


# ----------------------------------------------------------------------------- statoil

SIDE = 32


def _radar(rng, iceberg: bool) -> tuple[list, list]:
    yy, xx = np.mgrid[0:SIDE, 0:SIDE].astype(float)
    cy, cx = rng.uniform(10, 22, 2)
    theta = rng.uniform(0, np.pi)
    aspect = rng.uniform(1.0, 1.8) if iceberg else rng.uniform(1.5, 3.5)
    size = rng.uniform(1.6, 3.2)
    u = ((xx - cx) * np.cos(theta) + (yy - cy) * np.sin(theta)) / (size * aspect)
    v = (-(xx - cx) * np.sin(theta) + (yy - cy) * np.cos(theta)) / size
    blob = np.exp(-(u ** 2 + v ** 2) / 2)
    peak1 = rng.uniform(6, 13) if iceberg else rng.uniform(10, 20)
    peak2 = peak1 * (rng.uniform(0.7, 1.0) if iceberg else rng.uniform(0.35, 0.75))
    base1, base2 = rng.normal(-24, 2), rng.normal(-27, 2)
    b1 = base1 + peak1 * blob + rng.normal(0, 1.8, blob.shape)
    b2 = base2 + peak2 * blob + rng.normal(0, 1.8, blob.shape)
    return b1.round(4).ravel().tolist(), b2.round(4).ravel().tolist()


def statoil(prepared: pathlib.Path, rng) -> C.Built:
    n = 320
    ids = C.hex_ids(rng, n, 8)
    berg = C.bernoulli(rng, np.full(n, 0.47))
    records = []
    for k in range(n):
        b1, b2 = _radar(rng, bool(berg[k]))
        angle = round(float(rng.normal(39.5 if berg[k] else 38.5, 3.5)), 4)
        records.append({"id": ids[k], "band_1": b1, "band_2": b2,
                        "inc_angle": "na" if not berg[k] and rng.random() < 0.08 else angle,
                        "is_iceberg": int(berg[k])})
    tr, te = C.shuffled_split(n, 0.2, rng)
    train = [records[k] for k in tr]
    test = [{key: records[k][key] for key in ("id", "band_1", "band_2", "inc_angle")}
            for k in te]
    pub, priv = prepared / "public", prepared / "private"
    C.sevenz({"train.json": json.dumps(train).encode()}, pub / "train.json.7z")
    C.sevenz({"test.json": json.dumps(test).encode()}, pub / "test.json.7z")
    answers = pd.DataFrame({"id": [records[k]["id"] for k in te],
                            "is_iceberg": [records[k]["is_iceberg"] for k in te]})
    C.write_csv(answers, priv / "test.csv")
    sample = answers.assign(is_iceberg=0.5)
    C.write_csv(sample, priv / "sample_submission.csv")     # prepare.py keeps a copy here
    C.sevenz({"sample_submission.csv": sample.to_csv(index=False).encode()},
             pub / "sample_submission.csv.7z")
    C.write_description(prepared, C.describe(
        title="Ship or iceberg in radar images",
        goal="Each record is a satellite radar image of one floating object, in two "
             "polarisation bands. Predict the probability that the object is an iceberg.",
        metric="Binary log loss (lower is better).",
        files={"train.json.7z": "`train.json`: a list of records `id`, `band_1`, `band_2` "
                                f"(each {SIDE}x{SIDE} = {SIDE * SIDE} backscatter values in "
                                "dB, row by row), `inc_angle` (degrees, or \"na\"), "
                                "`is_iceberg` (0/1)",
               "test.json.7z": "`test.json`: the test records, without `is_iceberg`",
               "sample_submission.csv.7z": "`sample_submission.csv`: the format, with 0.5 "
                                           "everywhere"},
        submission="One row per test `id` with the probability `is_iceberg`.",
        header=["id", "is_iceberg"],
        note=f"Unlike the original 75x75 images, these are {SIDE}x{SIDE}."))
    return C.Built(f"{len(tr)} train / {len(te)} test records ({SIDE}x{SIDE}, 2 bands)",
                   "simulated radar blobs (numpy)",
                   "ships are elongated, brighter in band 1 and weaker in band 2; icebergs "
                   "round with similar bands; missing angles only on ships")
