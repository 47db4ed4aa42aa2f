"""A frozen-LM instrumenter (RL for MLE agents: "a frozen copy of the base model inserts
the prints"), plugged into the environment's `Instrumenter` protocol.

The model sees the program with numbered lines and answers one line per print to insert:

    after 12: print("[[NONCE:data_loaded]]", train.shape)

`NONCE` is a placeholder: the model never sees the real nonce; we substitute it. The
prints are inserted after the named lines (with that line's indentation) and wrapped in
`try/except`, so a print can never break the program. The answer is accepted only if the
new program parses and, with every inserted print removed, its AST equals the original's;
otherwise `AstInstrumenter` runs instead and the fallback is counted.

The model must be frozen (the warm-start policy on CPU, the base model otherwise), never
the policy being trained, or the policy learns to game it.
"""

from __future__ import annotations

import ast
import re
import threading
from typing import Callable, Optional

from mle_rl.env import pysource
from mle_rl.env import instrument as inst

PLACEHOLDER = "NONCE"
HEADER = ("# Instrument this program\nAnswer one line per step that the program does, "
          "`after <line>: print(\"[[NONCE:<step>]]\", <value>)`, for the steps "
          + ", ".join(inst.STEPS) + ".\n")
_LINE = re.compile(r"^after (\d+): (print\(.*\))\s*$")


def numbered(code: str) -> str:
    return "".join(f"{i:3d}| {line}\n" for i, line in enumerate(code.splitlines(), 1))


def instrument_prompt(code: str) -> str:
    """The prompt for the instrumenting model: instructions, then the numbered program."""
    return HEADER + "```\n" + numbered(code) + "```\n"


def reference_answer(code: str) -> str:
    """The answer the AST rules give (the SFT target): one `after N: print(...)` per step,
    N the last line of the statement that does the step. Empty if the code does not parse."""
    try:
        tree = pysource.parse(code)
    except (SyntaxError, ValueError):
        return ""
    done: dict = {}
    imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    if imports:
        done["imports"] = (imports[-1], None)
    inst.AstInstrumenter()._scan(tree.body, done)
    lines = []
    for step in inst.STEPS:
        if step in done:
            stmt, expr = done[step]
            value = f", {expr}" if expr else ""
            lines.append((stmt.end_lineno, f'after {stmt.end_lineno}: print("[[{PLACEHOLDER}:'
                                           f'{step}]]"{value})'))
    return "".join(line + "\n" for _, line in sorted(lines, key=lambda x: x[0]))


def _is_marker_print(stmt: ast.stmt, marker_text: str) -> bool:
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "print"):
        return False
    args = stmt.value.args
    return bool(args) and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str) \
        and marker_text in args[0].value


class _Strip(ast.NodeTransformer):
    def __init__(self, marker_text: str):
        self.marker_text = marker_text

    def generic_visit(self, node):
        super().generic_visit(node)
        for field, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                setattr(node, field, [s for s in value if not _is_marker_print(s, self.marker_text)])
        return node


def strip_marker_prints(tree: ast.AST, marker_text: str) -> ast.AST:
    """`tree` without the print statements whose first argument contains `marker_text`."""
    return _Strip(marker_text).visit(tree)


def same_program(original: str, instrumented: str, marker_text: str) -> bool:
    """True iff `instrumented` parses and equals `original` once its marker prints go."""
    try:
        a = pysource.parse(original)
        b = strip_marker_prints(pysource.parse(instrumented), marker_text)
    except (SyntaxError, ValueError, RecursionError):
        return False
    return ast.dump(a) == ast.dump(b)


def apply_answer(code: str, answer: str) -> tuple[Optional[str], tuple]:
    """Inserts the answer's prints (placeholder kept) into `code`.

    Returns (instrumented code, steps) or (None, ()) when the answer is unusable: no
    well-formed line, a line number out of range, a print that does not parse or names no
    step. Later lines with the same step are ignored.
    """
    src = code.splitlines()
    inserts: dict = {}
    steps = []
    for raw in answer.strip().splitlines():
        m = _LINE.match(raw.strip())
        if not m:
            continue
        n, stmt = int(m.group(1)), m.group(2)
        step = re.search(r"\[\[" + PLACEHOLDER + r":(\w+)\]\]", stmt)
        if not (1 <= n <= len(src)) or not step or step.group(1) not in inst.STEPS \
                or step.group(1) in steps:
            continue
        try:
            node = pysource.parse(stmt)
        except (SyntaxError, ValueError):
            continue
        if len(node.body) != 1 or not _is_marker_print(node.body[0], f"[[{PLACEHOLDER}:"):
            continue
        steps.append(step.group(1))
        inserts.setdefault(n, []).append(stmt)
    if not steps:
        return None, ()
    out = []
    for i, line in enumerate(src, 1):
        out.append(line)
        indent = line[:len(line) - len(line.lstrip())]
        for stmt in inserts.get(i, ()):
            out.append(indent + stmt)
    return "\n".join(out) + "\n", tuple(s for s in inst.STEPS if s in steps)


def _guard(code: str, marker_text: str) -> str:
    """Wraps each marker print in try/except (so a failing value never breaks the run)."""
    lines = []
    for line in code.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("print(") and marker_text in stripped:
            ind = line[:len(line) - len(stripped)]
            lines += [f"{ind}try:", f"{ind}    {stripped}", f"{ind}except Exception:",
                      f"{ind}    pass"]
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


class LMInstrumenter:
    """`Instrumenter` backed by a frozen model: `generate(prompt) -> answer text`.

    Counts `calls`, `accepted` and `fallbacks` (answers rejected, AST instrumenter used).
    """

    name = "lm"

    def __init__(self, generate: Callable[[str], str], fallback=None):
        self._generate = generate
        self._fallback = fallback or inst.AstInstrumenter()
        self._lock = threading.Lock()
        self.calls = self.accepted = self.fallbacks = 0

    def check(self, code: str, answer: str) -> Optional[tuple[str, tuple]]:
        """(placeholder-tagged program, steps) if `answer` is acceptable for `code`."""
        new, steps = apply_answer(code, answer)
        if new is None or not same_program(code, new, f"[[{PLACEHOLDER}:"):
            return None
        return new, steps

    def instrument(self, code: str, nonce: str) -> inst.InstrumentResult:
        with self._lock:
            self.calls += 1
        try:
            answer = self._generate(instrument_prompt(code))
        except Exception:  # a broken model must not break the environment
            answer = ""
        ok = self.check(code, answer)
        if ok is None:
            with self._lock:
                self.fallbacks += 1
            return self._fallback.instrument(code, nonce)
        new, steps = ok
        new = _guard(new.replace(f"[[{PLACEHOLDER}:", f"[[{nonce}:"), f"[[{nonce}:")
        try:
            pysource.check_compiles(new)
        except (SyntaxError, ValueError):
            with self._lock:
                self.fallbacks += 1
            return self._fallback.instrument(code, nonce)
        with self._lock:
            self.accepted += 1
        return inst.InstrumentResult(new, steps, False)

    def stats(self) -> dict:
        return {"calls": self.calls, "accepted": self.accepted, "fallbacks": self.fallbacks}
