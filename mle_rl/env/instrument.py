"""Environment instrumentation: prints inserted after the program's high-level steps,
matched after execution for partial credit (RL for MLE agents, Sec. "instrumentation").

An `Instrumenter` turns code into code with up to 7 extra prints, one per step in
`STEPS`. Each print is tagged with a per-execution random nonce,
`[[<nonce>:<step>]] <value>`, and `match_hits` counts only lines carrying that nonce, so a
program that prints the marker strings itself (it cannot know the nonce when it is
written) earns nothing.

`AstInstrumenter` is deterministic: it walks the program's statements in source order and
inserts, after the first statement matching each step's rule, a guarded print (an
exception inside the print is swallowed, so instrumentation never breaks a program). If
the result does not compile, the original runs instead (`fallback=True`). A frozen-LM
instrumenter (as in the paper) plugs into the same `Instrumenter` protocol.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import secrets
from typing import Optional, Protocol

from mle_rl.env import pysource

STEPS = ("imports", "data_loaded", "model_built", "model_trained", "predicted",
         "submission_written", "validation_metric")

_LOAD_FUNCS = {"read_csv", "read_parquet", "read_json", "read_table", "read_excel",
               "read_feather", "read_pickle", "load", "loadtxt", "genfromtxt", "load_npz",
               "imread", "open_dataset", "load_dataset"}
_MODEL_SUFFIXES = ("Classifier", "Regressor", "Regression", "Model", "Pipeline", "SVC", "SVR",
                   "Ridge", "Lasso", "ElasticNet", "Booster", "Sequential", "Net", "Estimator",
                   "NB", "Forest", "Boost", "Trees", "Neighbors", "CV")
_MODEL_NAMES = {"make_pipeline", "XGBClassifier", "LGBMClassifier", "CatBoostClassifier",
                "GaussianNB", "MultinomialNB", "BernoulliNB", "KNeighborsClassifier"}
_CV_FUNCS = {"cross_val_score", "cross_validate"}
_FIT_FUNCS = {"fit", "train", "partial_fit"} | _CV_FUNCS
_PREDICT_FUNCS = {"predict", "predict_proba", "predict_log_proba", "decision_function"}
_METRIC_RE = re.compile(r"(score|auc|acc|accuracy|loss|rmse|mse|mae|f1|logloss|error|metric|"
                        r"jaccard|rmsle|r2)", re.I)
_WRITE_FUNCS = {"to_csv", "savetxt"}
# Statements instrumented per step at most (each prints only if it is the step's first to run).
MAX_PRINTS_PER_STEP = 8


@dataclasses.dataclass(frozen=True)
class InstrumentResult:
    """code: what to run; inserted: step names that got a print; fallback: True when the
    instrumented code did not compile and `code` is the original."""

    code: str
    inserted: tuple = ()
    fallback: bool = False


class Instrumenter(Protocol):
    name: str

    def instrument(self, code: str, nonce: str) -> InstrumentResult:
        ...


def new_nonce() -> str:
    """A fresh random tag for one execution: 16 hex characters from `secrets`."""
    return secrets.token_hex(8)


def marker(nonce: str, step: str) -> str:
    return f"[[{nonce}:{step}]]"


def marker_prefix(nonce: str) -> str:
    """What every marker line of this execution starts with (for the sandbox to keep)."""
    return f"[[{nonce}:"


def match_hits(stdout: str, nonce: str) -> tuple:
    """Steps whose nonce-tagged print appears at the start of a line of `stdout`.

    Each step counts once; returned in `STEPS` order. Lines without the exact nonce (or
    with a different one) are ignored.
    """
    if not nonce or not re.fullmatch(r"[0-9A-Za-z]+", nonce):
        return ()
    pat = re.compile(r"^\[\[" + nonce + r":(" + "|".join(STEPS) + r")\]\]", re.M)
    found = set(pat.findall(stdout))
    return tuple(s for s in STEPS if s in found)


_ANY_MARKER = re.compile(r"\[\[[0-9A-Za-z]+:(" + "|".join(STEPS) + r")\]\]")


def strip_nonces(text: str) -> str:
    """Replaces `[[<nonce>:step]]` by `[step]`, for showing output back to the policy."""
    return _ANY_MARKER.sub(lambda m: f"[{m.group(1)}]", text)


# ----------------------------------------------------------------------------- AST rules


def _call_name(node: ast.AST) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def _calls(stmt: ast.stmt):
    return [n for n in ast.walk(stmt) if isinstance(n, ast.Call)]


def _target_name(stmt: ast.stmt) -> Optional[str]:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        t = stmt.targets[0]
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        t = stmt.target
    else:
        return None
    return t.id if isinstance(t, ast.Name) else None


def _is_model_ctor(name: str) -> bool:
    return name in _MODEL_NAMES or (name[:1].isupper() and name.endswith(_MODEL_SUFFIXES))


def _has_string(stmt: ast.stmt, needle: str) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and needle in n.value
               for n in ast.walk(stmt))


def _step_of(stmt: ast.stmt) -> list[tuple[str, Optional[str]]]:
    """(step, expression to print or None) for each step this simple statement does."""
    out = []
    names = [_call_name(c) for c in _calls(stmt)]
    target = _target_name(stmt)
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        out.append(("imports", None))
    if any(n in _LOAD_FUNCS for n in names) or (
            "open" in names and _has_string(stmt, "input")):
        out.append(("data_loaded", f"getattr({target}, 'shape', '')" if target else None))
    if any(_is_model_ctor(n) for n in names) and target:
        out.append(("model_built", f"type({target}).__name__"))
    if any(n in _FIT_FUNCS for n in names):
        out.append(("model_trained", None))
    is_metric = bool(target and names and _METRIC_RE.search(target))
    if any(n in _PREDICT_FUNCS for n in names) and not is_metric:
        out.append(("predicted", f"getattr({target}, 'shape', '')" if target else None))
    if any(n in _WRITE_FUNCS for n in names) or (
            "open" in names and _has_string(stmt, "submission")):
        out.append(("submission_written", None))
    if is_metric and not any(n in _FIT_FUNCS and n not in _CV_FUNCS for n in names):
        out.append(("validation_metric", target))
    return out


def _print_stmt(nonce: str, step: str, expr: Optional[str]) -> list[ast.stmt]:
    """The print of one step's marker (and value), at most once per run: every statement
    that does the step gets one, and the first of them that runs prints (a step done in
    a loop prints once, a step in a branch that never runs is left to the others)."""
    tag = repr(marker(nonce, step))
    seen = repr(f"_mle_rl_seen_{nonce}")
    value = ""
    if expr:  # a value that fails to render still leaves the marker
        value = (f"        try:\n            _mle_rl_value = str({expr})[:200]\n"
                 f"        except Exception:\n            _mle_rl_value = ''\n")
    src = (f"try:\n    _mle_rl_seen = globals().setdefault({seen}, set())\n"
           f"    if {step!r} not in _mle_rl_seen:\n        _mle_rl_seen.add({step!r})\n"
           + value +
           f"        print({tag}{', _mle_rl_value' if expr else ''}, flush=True)\n"
           f"except Exception:\n    pass\n")
    return pysource.parse(src).body


_SIMPLE = (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Import, ast.ImportFrom)


class AstInstrumenter:
    """Deterministic AST instrumenter: a print after each statement that does a step, the
    step's marker printed once per run.

    `imports` goes after the last top-level import; every other step after each simple
    statement (in source order, at any depth; the first `MAX_PRINTS_PER_STEP`) that matches
    its rule: data loaded (`read_csv`, `np.load`, ...), model built (an estimator
    constructor assigned to a name), model trained (`.fit`, ...), predicted (`.predict`,
    `.predict_proba`, ...), submission written (`.to_csv`, ...), validation metric (a
    metric-named variable assigned from a call; its value is printed). Each step's marker
    is printed once, by whichever of its statements runs first: a program whose first
    `.fit` sits in a branch that this task never takes (the generic program's text or
    picture code on a table) still shows the fit that does run. (`_scan` keeps the first
    statement of each step only: the LM instrumenter's reference answer.)
    """

    name = "ast"

    def instrument(self, code: str, nonce: str) -> InstrumentResult:
        try:
            tree = pysource.parse(code)
        except (SyntaxError, ValueError):
            return InstrumentResult(code, (), True)
        imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        found: dict = {"imports": [(imports[-1], None)]} if imports else {}
        self._scan_all(tree.body, found)
        if not found:
            return InstrumentResult(code, (), False)
        by_stmt: dict = {}
        for step, places in found.items():
            for stmt, expr in places:
                by_stmt.setdefault(id(stmt), []).append((step, expr))
        self._insert(tree, by_stmt, nonce)
        try:
            new_code = pysource.unparse(ast.fix_missing_locations(tree))
            pysource.check_compiles(new_code)
        except (SyntaxError, ValueError, RecursionError):
            return InstrumentResult(code, (), True)
        return InstrumentResult(new_code, tuple(s for s in STEPS if s in found), False)

    def _scan(self, body: list, done: dict) -> None:
        """The first statement of each step: done[step] = (stmt, expr)."""
        found: dict = {}
        self._scan_all(body, found, limit=1)
        for step, places in found.items():
            done.setdefault(step, places[0])

    def _scan_all(self, body: list, found: dict, limit: int = MAX_PRINTS_PER_STEP) -> None:
        """Every statement of each step but `imports`, in source order: found[step] =
        [(stmt, expr), ...], at most `limit` each."""
        for stmt in body:
            if isinstance(stmt, _SIMPLE):
                for step, expr in _step_of(stmt):
                    if step == "imports":
                        continue
                    places = found.setdefault(step, [])
                    if len(places) < limit:
                        places.append((stmt, expr))
            for field in ("body", "orelse", "finalbody", "handlers"):
                sub = getattr(stmt, field, None)
                if isinstance(sub, list) and sub and isinstance(sub[0], (ast.stmt,
                                                                         ast.excepthandler)):
                    if isinstance(sub[0], ast.excepthandler):
                        for h in sub:
                            self._scan_all(h.body, found, limit)
                    else:
                        self._scan_all(sub, found, limit)
            if isinstance(stmt, ast.Match):
                for case in stmt.cases:
                    self._scan_all(case.body, found, limit)

    def _insert(self, node: ast.AST, by_stmt: dict, nonce: str) -> None:
        for field, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                new = []
                for stmt in value:
                    self._insert(stmt, by_stmt, nonce)
                    new.append(stmt)
                    for step, expr in by_stmt.get(id(stmt), ()):
                        new.extend(_print_stmt(nonce, step, expr))
                setattr(node, field, new)
            elif isinstance(value, list):
                for v in value:
                    if isinstance(v, ast.AST):
                        self._insert(v, by_stmt, nonce)
            elif isinstance(value, ast.AST):
                self._insert(value, by_stmt, nonce)


class NoInstrumenter:
    """Runs the code as written (ablation: no partial credit)."""

    name = "none"

    def instrument(self, code: str, nonce: str) -> InstrumentResult:
        return InstrumentResult(code, (), False)


def get_instrumenter(spec) -> Instrumenter:
    """"ast" | "none" | None | an `Instrumenter`. "lm" needs a policy dir (not wired yet)."""
    if spec is None or spec == "none":
        return NoInstrumenter()
    if spec == "ast":
        return AstInstrumenter()
    if spec == "lm":
        raise ValueError("The 'lm' instrumenter needs a frozen policy checkpoint, which is not "
                         "wired in yet; use --instrument ast or none.")
    if hasattr(spec, "instrument"):
        return spec
    raise ValueError(f"Unknown instrumenter {spec!r}; use 'ast', 'lm' or 'none'.")

