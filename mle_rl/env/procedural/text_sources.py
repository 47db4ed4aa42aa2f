"""Tables with a free-text column, for the procedural generator: docstrings of installed libraries.

One row per harvested docstring (`env/builtin/docstrings.py`: numpy, pandas, scikit-learn,
scipy, the standard library) with its prose (summary and extended description, on one
line), the object's short name, its library and sub-module, and numbers read from the rest
of the docstring: how many parameters it documents, how many sections it has, how many
lines it runs to, and whether it has examples, notes, a "See Also" or a "Returns" section.
`tables()` offers one table per set of two or more libraries, so the generator
(`generate.make_task`) deals varied tasks from them: the library (2 to 5 classes) or a
section flag as the class, the counts as numeric targets, the text always among the
features (`Table.keep`), beside whatever numbers and categories it draws, under its own
column names and wording. A policy that learns these reads text by its content, not by
a task's name.

Debian's package descriptions are kept aside as a text source the project never trains,
tunes or evaluates on (issue 30's held-out check): nothing here reads them.
"""

from __future__ import annotations

import functools
import itertools

import pandas as pd

from mle_rl.env.builtin import docstrings
from mle_rl.env.procedural.sources import Table

LIBRARIES = tuple(docstrings.MODULES)
MAX_DOCS_PER_LIBRARY = 1200


@functools.lru_cache(maxsize=1)
def frame() -> pd.DataFrame:
    """Every usable docstring (prose of 40 characters or more), one row each."""
    rows = []
    for lib, docs in docstrings.harvest().items():
        kept = 0
        for qualname, doc in docs:
            text = docstrings.summary_text(doc)
            if len(text) < 40 or kept >= MAX_DOCS_PER_LIBRARY:
                continue
            kept += 1
            secs = docstrings.sections(doc)
            parts = qualname.split(".")
            rows.append({"text": text, "name": parts[-1],
                         "module": parts[1] if len(parts) > 2 else parts[0],
                         "library": lib,
                         "n_params": len(docstrings.parameters(secs.get("Parameters", ""))),
                         "n_sections": len(secs), "doc_lines": doc.count("\n") + 1,
                         "has_examples": int(">>>" in doc or "Examples" in secs),
                         "has_notes": int("Notes" in secs),
                         "has_see_also": int("See Also" in secs),
                         "has_returns": int("Returns" in secs)})
    return pd.DataFrame(rows).drop_duplicates("text").reset_index(drop=True)


def _load(libs: tuple) -> pd.DataFrame:
    df = frame()
    return df[df["library"].isin(libs)].reset_index(drop=True)


@functools.lru_cache(maxsize=1)
def tables() -> tuple:
    """One `Table` per set of two or more libraries (26), the text column kept."""
    out = []
    for k in range(2, len(LIBRARIES) + 1):
        for libs in itertools.combinations(LIBRARIES, k):
            names = ", ".join(libs[:-1]) + " and " + libs[-1]
            out.append(Table(f"docstrings/{'+'.join(libs)}", f"Docstrings of {names}",
                             "the documentation of installed Python libraries",
                             functools.partial(_load, libs), keep=("text",)))
    return tuple(out)
