"""Shared pieces of the stand-ins: deterministic writers, id formats, splits, descriptions.

Every writer here gives the same bytes for the same input: CSVs via pandas, JSON with a
fixed layout, zip entries with a fixed date, 7z members written from a file whose mtime is
pinned (py7zr stores the mtime). Archives hold their members at the root, as MLE-bench's
`compress` (arcname relative to the folder) and `shutil.make_archive(..., root_dir)` do.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pathlib
import shutil
import tempfile
import zipfile
import zlib
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

EPOCH = 315532800          # 1980-01-01, the earliest date a zip entry can hold
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
HEX = np.array(list("0123456789abcdef"))
B36 = np.array(list("0123456789abcdefghijklmnopqrstuvwxyz"))


@dataclasses.dataclass
class Built:
    """What a builder reports about the competition it wrote (for the CLI and the docs)."""

    rows: str          # e.g. "1200 train / 300 test"
    source: str        # where the data came from
    signal: str        # what a model can learn


def rng_for(seed: int, comp_id: str) -> np.random.Generator:
    """A generator of its own for each competition, fixed by (seed, id)."""
    return np.random.default_rng([int(seed), zlib.crc32(comp_id.encode())])


# ----------------------------------------------------------------------------- ids


def hex_ids(rng, n: int, width: int, upper: bool = False) -> list[str]:
    """n distinct random hex strings of `width` characters."""
    out, seen = [], set()
    while len(out) < n:
        s = "".join(rng.choice(HEX, width))
        if s not in seen:
            seen.add(s)
            out.append(s.upper() if upper else s)
    return out


def b36_ids(rng, n: int, width: int) -> list[str]:
    out, seen = [], set()
    while len(out) < n:
        s = "".join(rng.choice(B36, width))
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def distinct_ints(rng, n: int, low: int, high: int) -> np.ndarray:
    """n distinct integers in [low, high), in random order."""
    return low + rng.choice(high - low, size=n, replace=False)


def split(n: int, test_frac: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """(train positions, test positions) of a shuffled split, as train_test_split does."""
    perm = rng.permutation(n)
    n_test = int(round(n * test_frac))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def shuffled_split(n: int, test_frac: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """As `split` but each side keeps the shuffled order (train_test_split's row order)."""
    perm = rng.permutation(n)
    n_test = int(round(n * test_frac))
    return perm[n_test:], perm[:n_test]


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def bernoulli(rng, p) -> np.ndarray:
    p = np.asarray(p, dtype=float)
    return (rng.random(p.shape) < p).astype(int)


# ----------------------------------------------------------------------------- writers


def write_csv(df: pd.DataFrame, path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)


def write_json(records, path: pathlib.Path, indent=None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=indent))


def zip_folder(folder: pathlib.Path, dest: pathlib.Path) -> None:
    """dest.zip holding folder's files at the root (names sorted), as MLE-bench's compress."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            zip_bytes(z, str(path.relative_to(folder)), path.read_bytes())


def zip_bytes(z: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    z.writestr(info, data)


def zip_file(src: pathlib.Path, dest: pathlib.Path) -> None:
    """dest.zip holding the one file src under its own name (shutil.make_archive's way)."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        zip_bytes(z, src.name, src.read_bytes())


def sevenz(members: Mapping[str, bytes], dest: pathlib.Path) -> None:
    """dest.7z holding each (arcname -> bytes), with a pinned mtime so the bytes repeat."""
    import py7zr

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, data in members.items():
            p = pathlib.Path(tmp) / name
            p.write_bytes(data)
            os.utime(p, (EPOCH, EPOCH))
            paths.append((p, name))
        with py7zr.SevenZipFile(dest, "w") as archive:
            for p, name in paths:
                archive.write(p, name)


def read_7z(path: pathlib.Path) -> dict[str, bytes]:
    """{arcname: bytes} of a .7z archive."""
    import py7zr

    with tempfile.TemporaryDirectory() as tmp:
        with py7zr.SevenZipFile(path) as archive:
            archive.extractall(tmp)
        return {str(p.relative_to(tmp)): p.read_bytes()
                for p in sorted(pathlib.Path(tmp).rglob("*")) if p.is_file()}


def save_png(pixels: np.ndarray, path: pathlib.Path) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(path, format="PNG", optimize=False)


def save_jpg(pixels: np.ndarray, path: pathlib.Path, quality: int = 90) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(path, format="JPEG",
                                                             quality=quality)


def jpg_bytes(pixels: np.ndarray, quality: int = 90) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(buf, format="JPEG",
                                                             quality=quality)
    return buf.getvalue()


def reset(path: pathlib.Path) -> None:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


# ----------------------------------------------------------------------------- description


def describe(*, title: str, goal: str, metric: str, files: Mapping[str, str],
             submission: str, header: Sequence[str], note: str = "") -> str:
    """The competition's description.md, in our own words."""
    lines = [f"# {title} (small stand-in)", "", goal, "",
             "This is a small synthetic stand-in for the competition: the files have the "
             "names, columns and formats of the real prepared data, but far fewer rows, "
             "and the content is generated from data that ships with Python packages.", "",
             "## Evaluation", "", metric, "", "## Files", ""]
    lines += [f"* `{name}`: {text}" for name, text in files.items()]
    lines += ["", "## Submission", "", submission, "",
              "The header of `submission.csv` must be:", "", "```",
              ",".join(header), "```", ""]
    if note:
        lines += [note, ""]
    return "\n".join(lines)


def write_description(prepared: pathlib.Path, text: str) -> None:
    (prepared / "description.md").write_text(text, encoding="utf-8")
