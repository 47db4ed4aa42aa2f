"""Reports that keep their history: a rewritten results file keeps its earlier sections.

`experiments/results/*.md` mix what a script writes (the newest build's tables) with what
people wrote under earlier builds (their analysis, the figures they compare against). A
report is a preamble (its title and what it is: everything before the first `## ` heading)
and sections. A script that rewrites one writes its new text (preamble and the new
section), the marker line, then every section of the old file: those it had written last
time (above the old marker) and the history below it. So a rebuild adds a section on top,
the preamble is the script's current one, and no section is lost.
"""

from __future__ import annotations

import os
import pathlib
import re

MARKER = "<!-- Earlier results: report writers keep everything below this line. -->"
_SECTION = re.compile(r"^## ", re.M)


def compose(new_text: str, old_text: str) -> str:
    """`new_text`, the marker, then the old text's sections (all but its preamble)."""
    above, _, below = old_text.partition(MARKER)
    first = _SECTION.search(above)
    kept = (above[first.start():].strip("\n") + "\n\n" if first else "") + below.strip("\n")
    kept = kept.strip("\n")
    return new_text.rstrip("\n") + "\n\n" + MARKER + "\n" + ("\n" + kept + "\n" if kept else "")


def write_keeping_history(path, new_text: str) -> pathlib.Path:
    """Write `new_text` to `path` above the old file's sections (see `compose`); the write
    goes through a temporary file and a rename, so a failure leaves the old file whole."""
    path = pathlib.Path(path)
    old = path.read_text() if path.is_file() else ""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(compose(new_text, old))
    os.replace(tmp, path)
    return path
