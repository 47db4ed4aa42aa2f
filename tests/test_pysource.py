"""`pysource`: parse / unparse / compile of generated code from many threads at once."""

import ast
import concurrent.futures

import pytest

from mle_rl.env import pysource

PROGRAM = "\n".join(
    ["import numpy as np", "def f(x):"]
    + [f"    {'    ' * i}if x > {i}:" for i in range(12)]
    + [f"    {'    ' * 12}return [(a, {{b: c for b, c in a}}) for a in x]", "print(f([1]))"])


def _work(i):
    tree = pysource.parse(PROGRAM)
    text = pysource.unparse(tree)
    pysource.check_compiles(text)
    return ast.dump(tree)


def test_parallel_parses_agree_with_a_serial_one():
    want = ast.dump(ast.parse(PROGRAM))
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        got = list(ex.map(_work, range(400)))
    assert got == [want] * 400


def test_errors_are_the_usual_ones():
    with pytest.raises(SyntaxError):
        pysource.parse("def (")
    with pytest.raises(SyntaxError):
        pysource.check_compiles("return 1")
    with pytest.raises((SyntaxError, ValueError)):   # null byte: which one depends on Python
        pysource.parse("x = 1\0")
