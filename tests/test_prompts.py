"""Prompts fit their token budget by cutting the long parts, never the instructions;
responses parse into plan and code with a clear status."""

import ast
import dataclasses

import pytest

from tests._tiny_task import GOOD_CODE, make_tiny_task
from mle_rl.env import prompts


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return make_tiny_task(tmp_path_factory.mktemp("prompts"))


def long_task(task):
    desc = "# Long task\n" + "\n".join(f"Paragraph {i}: " + "words " * 30 for i in range(300))
    root = task.root.parent / "long"
    if not root.exists():
        import shutil
        shutil.copytree(task.root, root)
        (root / "description.md").write_text(desc)
    return dataclasses.replace(task, root=root)


def words(text):
    return len(text.split())


def test_data_listing(task):
    listing = prompts.data_listing(task.public_dir)
    assert "input/train.csv" in listing and "input/test.csv" in listing
    assert "id,x,y" in listing           # header
    assert "0,1,1" in listing            # a first row
    assert "B)" in listing               # a size


def test_solve_prompt_full_when_it_fits(task):
    p = prompts.solve_prompt(task, max_tokens=4000)
    assert task.description.strip() in p and prompts.RULES in p
    assert "cut" not in p


@pytest.mark.parametrize("budget", [500, 800, 2000])
@pytest.mark.parametrize("counter", [None, words])
def test_solve_prompt_fits_budget_and_keeps_rules(task, budget, counter):
    t = long_task(task)
    p = prompts.solve_prompt(t, max_tokens=budget, count_tokens=counter)
    assert (counter or prompts.approx_tokens)(p) <= budget
    assert prompts.RULES in p and prompts.ROLE in p
    assert "rest of the description cut" in p
    assert "Paragraph 0:" in p            # the head of the description survives


def test_budget_too_small_for_instructions(task):
    with pytest.raises(ValueError, match="too small"):
        prompts.solve_prompt(task, max_tokens=50)


def test_improve_prompt_cuts_output_head_and_code_on_statements(task):
    code = "\n".join(f"x_{i} = {i}  # step {i}" for i in range(400)) + "\n"
    output = "\n".join(f"log line {i}" for i in range(5000)) + "\n[[ab12cd:predicted]] (10,)"
    p = prompts.improve_prompt(task, "Plan: fit a model.", code, output, max_tokens=1500)
    assert prompts.approx_tokens(p) <= 1500
    assert prompts.IMPROVE_RULES in p
    assert "log line 4999" in p and "log line 0\n" not in p      # the tail of the output
    assert "[predicted] (10,)" in p and "ab12cd" not in p       # nonces are stripped
    block = p.split("```python\n")[1].split("```")[0]
    assert block.startswith("x_0 = 0")
    assert "more lines not shown" in block
    ast.parse(block)                                             # whole statements only


def test_improve_prompt_shows_everything_when_it_fits(task):
    p = prompts.improve_prompt(task, "my plan", GOOD_CODE, "val 0.9", max_tokens=4000)
    assert GOOD_CODE in p and "my plan" in p and "val 0.9" in p


def test_cut_code_keeps_compound_statements_whole():
    code = "import os\n\ndef f():\n    a = 1\n    b = 2\n    return a + b\n\nprint(f())\n"
    cut = prompts.cut_code(code, 40)
    assert cut.startswith("import os\n") and "def f" not in cut
    assert prompts.cut_code(code, 1000) == code


RESP = "I will fit a logistic regression.\n\n```python\nprint('hi')\n```\n"


@pytest.mark.parametrize("text,status,plan,code", [
    (RESP, "ok", "I will fit a logistic regression.", "print('hi')\n"),
    ("plan\n```py\nx = 1\n```", "ok", "plan", "x = 1\n"),
    ("plan\n```\nx = 1\n```", "ok", "plan", "x = 1\n"),                 # untagged block
    ("plan\n```bash\npip install x\n```\n```python\nx = 1\n```", "ok", "plan", "x = 1\n"),
    ("plan only, no code", "no_code", "plan only, no code", ""),
    ("plan\n```python\n\n```", "no_code", "plan", ""),
    ("plan\n```python\nx = 1\n```\nand\n```python\ny = 2\n```", "ambiguous", "plan", ""),
    ("plan\n```python\ndef f(:\n```", "syntax_error", "plan", "def f(:\n"),
    ("plan\n```python\nx = 1\ny = 2\n", "ok", "plan", "x = 1\ny = 2\n"),  # cut at max tokens
    ("plan\n```python\nx = (1,\n", "syntax_error", "plan", "x = (1,\n"),
])
def test_parse_response(text, status, plan, code):
    got = prompts.parse_response(text)
    assert (got.status, got.plan, got.code) == (status, plan, code)
    assert (got.message == "") == (status == "ok")


def test_data_listing_summarizes_big_folders_and_long_lines(tmp_path):
    (tmp_path / "images").mkdir()
    for i in range(25):
        (tmp_path / "images" / f"{i:03d}.jpg").write_bytes(b"x" * 10)
    (tmp_path / "wide.csv").write_text("a" * 100_000 + "\n1,2\n")
    listing = prompts.data_listing(tmp_path)
    assert "input/images/ (25 files, 250 B; e.g. 000.jpg, 001.jpg, 002.jpg)" in listing
    assert "001.jpg (" not in listing
    rows = [ln for ln in listing.splitlines() if ln.startswith("    ")]
    assert rows[0].endswith(" ...") and len(rows[0]) < 220 and rows[1] == "    1,2"
