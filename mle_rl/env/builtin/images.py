"""digit-images: handwritten digits stored as PNG files with a labels CSV, log loss.

The 1,797 8x8 digits of scikit-learn's `load_digits` (UCI optical recognition of handwritten
digits), upscaled to 32x32 grayscale PNGs, like leaf-classification's images + CSV layout.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pandas as pd
from PIL import Image
from sklearn import datasets

from mle_rl.env.builtin import writer
from mle_rl.env.builtin.spec import BuiltinSpec
from mle_rl.env.graders import TableGrader

SEED = 7
SIZE = 32
CLASSES = tuple(str(d) for d in range(10))


def _to_png(pixels: np.ndarray, path: pathlib.Path) -> None:
    """pixels: [8, 8] in 0..16 -> a SIZE x SIZE 8-bit grayscale PNG (ink is bright)."""
    img = Image.fromarray(np.round(pixels * (255.0 / 16.0)).astype(np.uint8), mode="L")
    img.resize((SIZE, SIZE), Image.Resampling.BILINEAR).save(path, optimize=False)


def build(root: pathlib.Path) -> None:
    data = datasets.load_digits()
    n = len(data.target)
    rng = np.random.default_rng(SEED)
    ids = np.array([f"img_{k:04d}" for k in rng.permutation(n)])  # ids carry no label order
    labels = data.target.astype(int)
    (root / "public" / "images").mkdir(parents=True)
    for k in range(n):
        _to_png(data.images[k], root / "public" / "images" / f"{ids[k]}.png")
    df = pd.DataFrame({"id": ids, "label": labels})
    tr, te = writer.split_ids(n, 0.3, SEED, stratify=labels)
    train = df.iloc[tr].sort_values("id")
    test_full = df.iloc[te].sort_values("id")
    answers = test_full[["id", "label"]]
    sample = pd.DataFrame({"id": answers["id"].to_numpy()})
    for c in CLASSES:
        sample[c] = 0.1
    desc = writer.describe(
        title="Digit Images",
        overview="Handwritten digits 0-9 were scanned and reduced to 8x8 blocks of ink counts, "
                 "then stored here as 32x32 grayscale PNG images (bright = ink). Classify each "
                 "test image, giving a probability for each digit. (UCI optical recognition of "
                 "handwritten digits, as shipped with scikit-learn's load_digits.)",
        files={"images/<id>.png": f"{n} images, one per id, for train and test alike.",
               "train.csv": f"{len(train)} rows: the image id and its digit.",
               "test.csv": f"{len(test_full)} rows: the image id only.",
               "sample_submission.csv": "a valid submission giving 0.1 to every digit."},
        columns={"id": "the image name without `.png`, e.g. `input/images/img_0001.png`",
                 "label": "the digit 0-9 (train only)"},
        metric="multiclass_log_loss",
        submission_text="Predict a probability for each digit, in columns named 0 to 9.",
        sample_submission=sample)
    writer.write_task(root, description=desc, train=train, test=test_full[["id"]],
                      answers=answers, sample_submission=sample, extra_files=("images",))


SPECS = (
    BuiltinSpec(id="digit-images", metric="multiclass_log_loss", modality="image",
                grader=TableGrader("multiclass_log_loss", "id", CLASSES, answer_label="label"),
                build=build, timeout_s=120, memory_mb=4096, reward_scale=2.0,
                packages=("scikit-learn", "pillow")),
)
