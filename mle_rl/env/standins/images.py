"""Image stand-ins in JPEG files: aerial-cactus-identification, dogs-vs-cats-redux,
plant-pathology-2020-fgvc7 and whale-categorization-playground.

Pictures are drawn with Pillow/NumPy from scikit-learn's bundled data: handwritten digits
(`load_digits`, 8x8, upscaled and coloured) as the objects, crops of the two sample
photographs (`load_sample_images`) as backgrounds, plus noise. What decides a label is a
shape or mark a model can see (which digit, which spots, which individual), never a file
name or an image statistic alone.
"""

from __future__ import annotations

import functools
import pathlib

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw

from mle_rl.env.standins import common as C


@functools.lru_cache(maxsize=1)
def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images.astype(np.float32) / 16.0, d.target


@functools.lru_cache(maxsize=1)
def _photos():
    from sklearn.datasets import load_sample_images

    return [np.asarray(im, dtype=np.float32) for im in load_sample_images().images]


def background(rng, size, tint=None, mix: float = 0.5) -> np.ndarray:
    """A random crop of a sample photograph, resized to size (h, w), optionally tinted."""
    photo = _photos()[int(rng.integers(2))]
    h, w = size
    ch, cw = int(rng.integers(h * 2, h * 5)), int(rng.integers(w * 2, w * 5))
    y, x = int(rng.integers(0, photo.shape[0] - ch)), int(rng.integers(0, photo.shape[1] - cw))
    crop = Image.fromarray(photo[y:y + ch, x:x + cw].astype(np.uint8)).resize((w, h),
                                                                              Image.BILINEAR)
    out = np.asarray(crop, dtype=np.float32)
    if tint is not None:
        out = (1 - mix) * out + mix * np.asarray(tint, dtype=np.float32)
    return out


def sprite(digit: np.ndarray, side: int, angle: float = 0.0) -> np.ndarray:
    """An 8x8 digit (0..1) as a side x side mask (0..1), bilinear, optionally rotated."""
    im = Image.fromarray((digit * 255).astype(np.uint8)).resize((side, side), Image.BILINEAR)
    if angle:
        im = im.rotate(angle, resample=Image.BILINEAR)
    return np.asarray(im, dtype=np.float32) / 255.0


def paste(canvas: np.ndarray, mask: np.ndarray, colour, y: int, x: int,
          alpha: float = 1.0) -> None:
    """Blends `colour` into canvas (h, w, 3) through mask at (y, x), clipped to the canvas."""
    h, w = mask.shape
    H, W = canvas.shape[:2]
    y0, x0, y1, x1 = max(y, 0), max(x, 0), min(y + h, H), min(x + w, W)
    if y0 >= y1 or x0 >= x1:
        return
    m = alpha * mask[y0 - y:y1 - y, x0 - x:x1 - x, None]
    canvas[y0:y1, x0:x1] = (1 - m) * canvas[y0:y1, x0:x1] + m * np.asarray(colour, np.float32)


def finish(canvas: np.ndarray, rng, noise: float = 8.0) -> np.ndarray:
    return np.clip(canvas + rng.normal(0, noise, canvas.shape), 0, 255).astype(np.uint8)


def pick_digit(rng, classes) -> np.ndarray:
    images, target = _digits()
    pool = np.flatnonzero(np.isin(target, classes))
    return images[int(rng.choice(pool))]


# ----------------------------------------------------------------------------- cactus


def _cactus_image(rng, has: bool) -> np.ndarray:
    img = background(rng, (32, 32), tint=(190, 165, 120), mix=0.55)
    if has or rng.random() < 0.35:                   # a cactus, or a round bush that is not
        side = int(rng.integers(14, 26))
        mask = sprite(pick_digit(rng, [1, 7] if has else [0, 6, 8]), side,
                      float(rng.normal(0, 12)))
        green = (int(rng.integers(40, 90)), int(rng.integers(100, 150)), int(rng.integers(40, 80)))
        paste(img, mask, green, int(rng.integers(-3, 32 - side + 3)),
              int(rng.integers(-3, 32 - side + 3)), float(rng.uniform(0.6, 0.9)))
    return finish(img, rng, 10.0)


def cactus(prepared: pathlib.Path, rng) -> C.Built:
    n = 480
    ids = [f"{h}.jpg" for h in C.hex_ids(rng, n, 32)]
    has = C.bernoulli(rng, np.full(n, 0.75))
    df = pd.DataFrame({"id": ids, "has_cactus": has})
    tr, te = C.shuffled_split(n, 0.19, rng)
    train, test = df.iloc[tr], df.iloc[te].reset_index(drop=True)
    pub, priv = prepared / "public", prepared / "private"
    C.write_csv(train, pub / "train.csv")
    C.write_csv(test, priv / "test.csv")
    C.write_csv(test.assign(has_cactus=0.5), pub / "sample_submission.csv")
    for part, rows in (("train", train), ("test", test)):
        folder = pub / part
        for name, h in zip(rows["id"], rows["has_cactus"]):
            C.save_jpg(_cactus_image(rng, bool(h)), folder / name)
        C.zip_folder(folder, pub / f"{part}.zip")
        C.reset(folder)
        folder.rmdir()                            # prepare.py keeps only the zips
    C.write_description(prepared, C.describe(
        title="Aerial cactus identification",
        goal="Each 32x32 aerial photo may show a columnar cactus. Predict the probability "
             "that it does (`has_cactus`).",
        metric="Area under the ROC curve (higher is better).",
        files={"train.csv": "`id` (the image file name), `has_cactus` (0/1)",
               "train.zip": "the training images, `<id>` at the archive's root",
               "test.zip": "the test images, the same way",
               "sample_submission.csv": "the test ids, with 0.5 everywhere"},
        submission="One row per test image `id` with the probability of a cactus.",
        header=["id", "has_cactus"]))
    return C.Built(f"{len(tr)} train / {len(te)} test images (32x32 RGB)",
                   "digits 1/7 (cactus) or 0/6/8 (bush) in green on sample-photo crops",
                   "an upright stroke shape in green; a third of the negatives carry a round "
                   "green distractor")


# ----------------------------------------------------------------------------- dogs vs cats

CATS, DOGS = [0, 6, 8], [1, 4, 7]


def _pet(rng, dog: bool) -> np.ndarray:
    img = background(rng, (48, 48), tint=(110, 110, 110), mix=0.6)
    side = int(rng.integers(30, 46))
    hue = rng.integers(0, 3)
    colour = np.full(3, 30.0)
    colour[hue] = rng.uniform(200, 255)                  # a saturated colour on a muted photo
    paste(img, sprite(pick_digit(rng, DOGS if dog else CATS), side, float(rng.normal(0, 12))),
          colour, int(rng.integers(0, 48 - side + 1)), int(rng.integers(0, 48 - side + 1)),
          float(rng.uniform(0.8, 1.0)))
    return finish(img, rng, 10.0)


def dogs_cats(prepared: pathlib.Path, rng) -> C.Built:
    n = 480
    dog = C.bernoulli(rng, np.full(n, 0.5))
    tr, te = C.shuffled_split(n, 0.2, rng)
    pub, priv = prepared / "public", prepared / "private"
    counter = {0: 0, 1: 0}
    for k in tr:
        kind = int(dog[k])
        name = f"{'dog' if kind else 'cat'}.{counter[kind]}.jpg"
        counter[kind] += 1
        C.save_jpg(_pet(rng, bool(kind)), pub / "train" / name)
    for i, k in enumerate(te, start=1):
        C.save_jpg(_pet(rng, bool(dog[k])), pub / "test" / f"{i}.jpg")
    # prepare.py zips both folders and leaves the folders in place too.
    C.zip_folder(pub / "train", pub / "train.zip")
    C.zip_folder(pub / "test", pub / "test.zip")
    ids = np.arange(1, len(te) + 1)
    C.write_csv(pd.DataFrame({"id": ids, "label": dog[te]}), priv / "answers.csv")
    C.write_csv(pd.DataFrame({"id": ids, "label": 0.5}), pub / "sample_submission.csv")
    C.write_description(prepared, C.describe(
        title="Dogs vs. cats",
        goal="Each picture shows a cat or a dog. Predict the probability that each test "
             "picture shows a dog.",
        metric="Binary log loss (lower is better).",
        files={"train/": "training pictures named `cat.<n>.jpg` and `dog.<n>.jpg` "
                         "(48x48 RGB)",
               "test/": "test pictures named `<id>.jpg`, id 1, 2, ...",
               "train.zip, test.zip": "the same two folders, zipped (files at the root)",
               "sample_submission.csv": "the format, with 0.5 everywhere"},
        submission="One row per test `id` with `label` = the probability of a dog.",
        header=["id", "label"]))
    return C.Built(f"{len(tr)} train / {len(te)} test images (48x48 RGB)",
                   "digits on sample-photo crops", "cat = a digit 0/6/8 shape, dog = 1/4/7, "
                   "in a random colour, size and angle")


# ----------------------------------------------------------------------------- plant

PLANT = ("healthy", "multiple_diseases", "rust", "scab")


def _leaf_image(rng, label: str) -> np.ndarray:
    img = background(rng, (64, 64), tint=(90, 110, 70), mix=0.4)
    layer = Image.new("L", (64, 64), 0)
    cx, cy = rng.normal(32, 3, 2)
    rx, ry = rng.uniform(18, 28), rng.uniform(12, 20)
    ImageDraw.Draw(layer).ellipse([cx - rx, cy - ry, cx + rx, cy + ry], fill=255)
    leaf = np.asarray(layer.rotate(float(rng.uniform(0, 180))), np.float32) / 255.0
    paste(img, leaf, (int(rng.integers(50, 90)), int(rng.integers(120, 170)), 50), 0, 0, 0.9)
    spots = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    draw = ImageDraw.Draw(spots)
    rust = label in ("rust", "multiple_diseases")
    scab = label in ("scab", "multiple_diseases")
    for _ in range(int(rng.integers(5, 12)) if rust else int(rng.integers(0, 3))):
        x, y, r = *rng.normal(32, 10, 2), rng.uniform(1.0, 2.2)
        colour = (230, 150, 30, 230) if rust else (170, 190, 90, 200)    # specks on healthy
        draw.ellipse([x - r, y - r, x + r, y + r], fill=colour)
    for _ in range(int(rng.integers(2, 5)) if scab else 0):
        x, y, r = *rng.normal(32, 9, 2), rng.uniform(2.5, 5.0)
        draw.polygon([(x + r * np.cos(t), y + r * np.sin(t) * rng.uniform(0.6, 1.2))
                      for t in np.linspace(0, 2 * np.pi, 7)[:-1]], fill=(80, 60, 35, 220))
    sp = np.asarray(spots, np.float32)
    a = sp[..., 3:] / 255.0 * leaf[..., None]
    img = (1 - a) * img + a * sp[..., :3]
    return finish(img, rng, 7.0)


def plant(prepared: pathlib.Path, rng) -> C.Built:
    n = 500
    while True:
        label = rng.choice(PLANT, size=n, p=[0.28, 0.09, 0.33, 0.30])
        tr, te = C.shuffled_split(n, 0.2, rng)
        if all(v in label[te] for v in PLANT):
            break
    one_hot = lambda idx: pd.DataFrame({c: (label[idx] == c).astype(int) for c in PLANT})
    train = pd.concat([pd.DataFrame({"image_id": [f"Train_{i}" for i in range(len(tr))]}),
                       one_hot(tr)], axis=1)
    answers = pd.concat([pd.DataFrame({"image_id": [f"Test_{i}" for i in range(len(te))]}),
                         one_hot(te)], axis=1)
    pub, priv = prepared / "public", prepared / "private"
    for name, k in zip(list(train["image_id"]) + list(answers["image_id"]), list(tr) + list(te)):
        C.save_jpg(_leaf_image(rng, str(label[k])), pub / "images" / f"{name}.jpg")
    C.write_csv(answers, priv / "test.csv")
    C.write_csv(answers[["image_id"]].assign(**{c: 0.25 for c in PLANT}),
                pub / "sample_submission.csv")
    C.write_csv(answers[["image_id"]], pub / "test.csv")
    C.write_csv(train, pub / "train.csv")
    C.write_description(prepared, C.describe(
        title="Plant pathology: apple leaf diseases",
        goal="Each photo shows one leaf that is healthy, has rust, has scab, or has several "
             "diseases. Predict the probability of each of the four.",
        metric="The mean over the four columns of the area under the ROC curve (higher is "
               "better).",
        files={"images/": "`Train_<n>.jpg` and `Test_<n>.jpg` (64x64 RGB)",
               "train.csv": "`image_id` and the one-hot `healthy`, `multiple_diseases`, "
                            "`rust`, `scab`",
               "test.csv": "`image_id`",
               "sample_submission.csv": "the format, with 0.25 everywhere"},
        submission="One row per test `image_id` with exactly the columns below.",
        header=["image_id", *PLANT]))
    return C.Built(f"{len(tr)} train / {len(te)} test images (64x64 RGB)",
                   "Pillow-drawn leaves on sample-photo crops",
                   "rust = small orange dots, scab = dark brown blotches, both = "
                   "multiple_diseases; healthy leaves carry a few pale specks")


# ----------------------------------------------------------------------------- whale


def _whale_image(rng, template: np.ndarray, colour) -> np.ndarray:
    img = background(rng, (40, 64), tint=(40, 70, 110), mix=0.75)
    side = int(rng.integers(28, 33))
    mask = sprite(template, side, float(rng.normal(0, 4)))
    fluke = np.concatenate([mask, mask[:, ::-1]], axis=1)      # a two-lobed tail
    paste(img, fluke, colour, (40 - side) // 2 + int(rng.integers(-2, 3)),
          32 - side + int(rng.integers(-2, 3)), float(rng.uniform(0.8, 0.95)))
    return finish(img, rng, 8.0)


def whale(prepared: pathlib.Path, rng) -> C.Built:
    images, _ = _digits()
    n_whales, n_new = 70, 70
    counts = np.minimum(1 + rng.geometric(0.3, n_whales), 10)
    names = [f"w_{h}" for h in C.hex_ids(rng, n_whales, 7)]
    templates = rng.choice(len(images), size=n_whales + n_new, replace=False)
    colours = rng.integers(150, 256, (n_whales + n_new, 3))
    rows = [(names[w], w) for w in range(n_whales) for _ in range(counts[w])]
    rows += [("new_whale", n_whales + j) for j in range(n_new)]
    df = pd.DataFrame(rows, columns=["Id", "who"]).iloc[rng.permutation(len(rows))]
    df.insert(0, "Image", [f"{h}.jpg" for h in C.hex_ids(rng, len(df), 8)])
    df = df.reset_index(drop=True)
    split = np.full(len(df), "", dtype=object)           # prepare.py's rule, in short:
    for _, grp in df.groupby("Id", sort=True):           # an id seen twice goes both ways,
        idx = grp.index.to_numpy()
        if len(idx) >= 2:
            split[idx[0]], split[idx[1]] = "train", "test"
        else:
            split[idx[0]] = "test" if rng.random() < 0.1 else "train"
    rest = np.flatnonzero(split == "")
    split[rest] = np.where(rng.random(len(rest)) < 0.1, "test", "train")
    train, answers = df[split == "train"], df[split == "test"].copy()
    only_test = set(answers["Id"]) - set(train["Id"])
    answers.loc[answers["Id"].isin(only_test), "Id"] = "new_whale"
    pub, priv = prepared / "public", prepared / "private"
    for part, frame in (("train", train), ("test", answers)):
        for name, who in zip(frame["Image"], frame["who"]):
            C.save_jpg(_whale_image(rng, images[who], colours[who]), pub / part / name)
    C.write_csv(answers[["Image", "Id"]], priv / "test.csv")
    C.write_csv(train[["Image", "Id"]], pub / "train.csv")
    C.write_csv(answers[["Image"]].assign(Id="new_whale w_1287fbc w_98baff9 w_7554f44 "
                                             "w_1eafe46"), pub / "sample_submission.csv")
    C.write_description(prepared, C.describe(
        title="Whale identification from tail flukes",
        goal="Each photo shows the tail of a whale. Name the whale: predict up to five ids "
             "per test photo, best first. `new_whale` stands for any whale not seen in "
             "training.",
        metric="Mean average precision at 5 (MAP@5, higher is better).",
        files={"train/": "training photos (64x40 RGB)", "test/": "test photos",
               "train.csv": "`Image` (the file name in train/), `Id` (the whale)",
               "sample_submission.csv": "the format: five space-separated ids per image"},
        submission="One row per test `Image` with `Id` holding up to five ids separated by "
                   "single spaces.",
        header=["Image", "Id"]))
    return C.Built(f"{len(train)} train / {len(answers)} test images ({n_whales} whales + "
                   f"new_whale)", "one digit instance per whale, mirrored as a fluke, on "
                   "sample-photo crops", "each whale is one fixed handwritten digit instance "
                                         "(and colour), re-drawn with shifts, size and noise")
