"""Harvest real docstrings from installed libraries, deterministically.

Walks a fixed list of modules per library, collects the docstrings of the public functions,
classes and methods defined in that library (not re-exports), and splits numpydoc-style
docstrings into their summary part and their sections. The result depends on the installed
versions of the libraries; tasks built from it record those versions in their cache marker.
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from typing import Iterator

MODULES = {
    "numpy": ("numpy", "numpy.linalg", "numpy.fft", "numpy.random", "numpy.ma",
              "numpy.polynomial.polynomial", "numpy.lib.stride_tricks", "numpy.testing"),
    "pandas": ("pandas", "pandas.api.types", "pandas.plotting", "pandas.testing",
               "pandas.core.groupby", "pandas.core.window", "pandas.core.resample",
               "pandas.core.strings.accessor", "pandas.core.indexes.datetimes"),
    "scikit-learn": ("sklearn.linear_model", "sklearn.ensemble", "sklearn.preprocessing",
                     "sklearn.metrics", "sklearn.model_selection", "sklearn.cluster",
                     "sklearn.decomposition", "sklearn.svm", "sklearn.tree", "sklearn.neighbors",
                     "sklearn.feature_extraction.text", "sklearn.pipeline", "sklearn.impute",
                     "sklearn.manifold", "sklearn.naive_bayes", "sklearn.covariance",
                     "sklearn.mixture", "sklearn.gaussian_process", "sklearn.neural_network",
                     "sklearn.feature_selection", "sklearn.calibration", "sklearn.compose",
                     "sklearn.utils", "sklearn.datasets", "sklearn.inspection"),
    "scipy": ("scipy.stats", "scipy.optimize", "scipy.linalg", "scipy.signal",
              "scipy.interpolate", "scipy.integrate", "scipy.sparse", "scipy.sparse.linalg",
              "scipy.spatial", "scipy.special", "scipy.ndimage", "scipy.cluster.hierarchy",
              "scipy.fft", "scipy.io"),
    "python-stdlib": ("os", "os.path", "json", "email.message", "email.utils", "collections",
                      "itertools", "functools", "pathlib", "re", "string", "textwrap",
                      "subprocess", "threading", "logging", "argparse", "datetime", "decimal",
                      "fractions", "statistics", "random", "shutil", "tarfile", "zipfile",
                      "csv", "http.client", "urllib.parse", "urllib.request", "unittest",
                      "typing", "inspect", "ast", "pickle", "copy", "heapq", "bisect",
                      "sqlite3", "xml.etree.ElementTree", "configparser", "difflib",
                      "calendar", "socket", "tempfile", "glob", "fnmatch", "gzip", "hashlib",
                      "contextlib", "dataclasses", "enum", "io", "operator", "pprint",
                      "queue", "sched", "selectors", "shlex", "struct", "sys", "time",
                      "traceback", "types", "uuid", "warnings", "weakref", "zlib", "codecs",
                      "locale", "math", "cmath", "platform", "multiprocessing", "asyncio",
                      "concurrent.futures", "email.parser", "html.parser", "imaplib",
                      "smtplib", "ftplib", "mailbox", "mimetypes", "netrc", "plistlib",
                      "pydoc", "doctest", "trace", "tokenize", "tomllib", "wave", "zipapp"),
}
ROOTS = {"numpy": ("numpy",), "pandas": ("pandas",), "scikit-learn": ("sklearn",),
         "scipy": ("scipy",), "python-stdlib": None}
DISTRIBUTIONS = ("numpy", "pandas", "scikit-learn", "scipy", "python")

SECTION_RE = re.compile(r"^\s*([A-Z][A-Za-z ]+)\n\s*(-{3,}|={3,})\s*$", re.M)


def _own(obj, library: str) -> bool:
    """True if obj is defined in `library` (stdlib: any module outside site-packages)."""
    mod = getattr(obj, "__module__", None) or ""
    roots = ROOTS[library]
    if roots is None:
        top = mod.split(".")[0]
        return bool(top) and top not in ("numpy", "pandas", "sklearn", "scipy", "builtins") \
            and not top.startswith("_pytest")
    return mod.split(".")[0] in roots


def _members(module) -> Iterator[tuple[str, object]]:
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    for name in sorted(set(names)):
        try:
            obj = getattr(module, name)
        except Exception:
            continue
        if inspect.isclass(obj) or inspect.isroutine(obj):
            yield f"{module.__name__}.{name}", obj
            if inspect.isclass(obj):
                for mname in sorted(vars(obj)):
                    if mname.startswith("_"):
                        continue
                    member = vars(obj)[mname]
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if inspect.isroutine(member) or isinstance(member, property):
                        yield f"{module.__name__}.{name}.{mname}", member


def harvest() -> dict[str, list[tuple[str, str]]]:
    """{library: [(qualified name, cleaned docstring)]}, deduplicated, in a fixed order."""
    out: dict[str, list[tuple[str, str]]] = {}
    seen: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for library, modules in MODULES.items():
            docs = []
            for modname in modules:
                try:
                    module = importlib.import_module(modname)
                except Exception:
                    continue
                for qualname, obj in _members(module):
                    owner = obj.fget if isinstance(obj, property) else obj
                    if not _own(owner, library) and not (
                            isinstance(obj, property) and ROOTS[library] is None):
                        continue
                    raw = getattr(obj, "__doc__", None)
                    doc = inspect.cleandoc(raw) if isinstance(raw, str) else ""
                    if len(doc) < 40 or doc in seen:
                        continue
                    seen.add(doc)
                    docs.append((qualname, doc))
            out[library] = docs
    return out


def summary_text(doc: str, max_chars: int = 800) -> str:
    """The prose before the first section header or example, on one line; "" if none."""
    m = SECTION_RE.search(doc)
    head = doc[: m.start()] if m else doc
    head = head.split(">>>")[0]
    head = re.split(r"^\s*\.\. ", head, maxsplit=1, flags=re.M)[0]  # directives
    text = " ".join(head.split())
    if len(text) > max_chars:
        text = text[:max_chars].rsplit(" ", 1)[0]
    return text


def sections(doc: str) -> dict[str, str]:
    """{section title: body} of a numpydoc docstring (bodies keep their lines)."""
    found = list(SECTION_RE.finditer(doc))
    out = {}
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(doc)
        out.setdefault(m.group(1).strip(), doc[m.end():end].strip("\n"))
    return out


PARAM_RE = re.compile(r"^(\*{0,2}[A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*\*{0,2}[A-Za-z_][A-Za-z0-9_]*)*)"
                      r"(?:\s*:\s*(.*))?$")


def parameters(body: str) -> list[tuple[str, str, str]]:
    """Parses a Parameters section body into [(name, type, description)], each on one line.

    Entries start at the section's base indentation as `name : type` (or just `name`);
    description lines are indented below. Returns [] if the body does not parse cleanly.
    """
    lines = body.splitlines()
    if not lines:
        return []
    base = min(len(l) - len(l.lstrip()) for l in lines if l.strip())
    entries: list[list] = []
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == base:
            m = PARAM_RE.match(line.strip())
            if not m:
                return []
            entries.append([m.group(1), (m.group(2) or "").strip(), []])
        elif entries:
            entries[-1][2].append(line.strip())
        else:
            return []
    return [(n, t, " ".join(" ".join(d).split())) for n, t, d in entries]
