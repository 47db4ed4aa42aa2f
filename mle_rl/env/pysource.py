"""Parsing and compiling Python source (generated programs) safely from many threads.

On CPython 3.11 the AST conversion keeps its recursion-depth bookkeeping in state that
all threads share: two threads parsing at once can fail with "SystemError: AST
constructor recursion depth mismatch". Our test suite hit it on 3.11.7 when the corpus
builder instrumented programs in parallel threads. Every parse, unparse and compile of
generated code in the library goes through this module's lock instead.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.RLock()


def parse(source: str) -> ast.Module:
    """`ast.parse(source)` under the lock (SyntaxError / ValueError as ast.parse)."""
    with _LOCK:
        return ast.parse(source)


def unparse(tree: ast.AST) -> str:
    with _LOCK:
        return ast.unparse(tree)


def check_compiles(source: str, filename: str = "solution.py") -> None:
    """Raises SyntaxError / ValueError if `source` does not compile as a module."""
    with _LOCK:
        compile(source, filename, "exec")
