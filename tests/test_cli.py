"""`python -m mle_rl tasks | prepare | exec | grade`: one JSON object on stdout; bad input
gives one clear line on stderr and exit status 2."""

import json
import subprocess
import sys

import pytest

from mle_rl.__main__ import main

TASK = "penguin-island"  # a small built-in task (multiclass log loss, lower is better)
COPY_SAMPLE = ("import pandas as pd\n"
               "pd.read_csv('input/sample_submission.csv').to_csv('submission.csv', index=False)\n")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cli_cache")
    out = subprocess.run([sys.executable, "-m", "mle_rl", "prepare", "--task", TASK,
                          "--cache_dir", str(cache)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["task"] == TASK and (cache / "tasks" / TASK / "public").is_dir()
    return cache


def cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 1, out       # exactly one JSON object on stdout
    return rc, json.loads(lines[0]), err


def test_tasks(capsys, cache):
    rc, got, _ = cli(capsys, "tasks", "--cache_dir", str(cache))
    assert rc == 0
    ids = {t["id"]: t for t in got["tasks"]}
    assert "tabular-synth" in ids and ids[TASK]["prepared"] is True


def test_exec_and_grade(capsys, cache, tmp_path):
    code = tmp_path / "sol.py"
    code.write_text(COPY_SAMPLE)
    rc, got, _ = cli(capsys, "exec", "--task", TASK, "--code", str(code),
                     "--cache_dir", str(cache), "--timeout_s", "60")
    assert rc == 0
    assert got["status"] == "ok" and got["score"] > 0
    assert got["reward"] == pytest.approx(-got["score"])        # lower is better
    assert got["hits"] == ["imports", "data_loaded", "submission_written"]
    assert got["duration_s"] > 0 and "stdout_tail" in got
    rc, m, _ = cli(capsys, "exec", "--task", TASK, "--code", str(code), "--cache_dir",
                   str(cache), "--instrument", "none", "--reward", "mlagent")
    assert rc == 0 and m["hits"] == [] and 0 < m["reward"] < 0.5   # sigmoid of a negative
    sample = cache / "tasks" / TASK / "public" / "sample_submission.csv"
    rc, g, _ = cli(capsys, "grade", "--task", TASK, "--submission", str(sample),
                   "--cache_dir", str(cache))
    assert rc == 0 and g["valid_submission"] is True and g["is_lower_better"] is True
    assert g["score"] == pytest.approx(got["score"])


def test_exec_failing_program(capsys, cache, tmp_path):
    code = tmp_path / "bad.py"
    code.write_text("import sys\nsys.exit(4)\n")
    rc, got, _ = cli(capsys, "exec", "--task", TASK, "--code", str(code),
                     "--cache_dir", str(cache))
    assert rc == 0   # the command worked; the program failed
    assert got["status"] == "error" and got["reward"] == pytest.approx(-9.9)  # 1 hit


def _bad(capsys, *argv, match):
    rc, got, err = cli(capsys, *argv)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert match in lines[0] and match in got["error"]


def test_unknown_task(capsys, cache, tmp_path):
    code = tmp_path / "ok.py"
    code.write_text("print(1)\n")
    _bad(capsys, "exec", "--task", "no-such-task", "--code", str(code), "--cache_dir",
         str(cache), match="Unknown task 'no-such-task'")
    _bad(capsys, "prepare", "--task", "no-such-task", "--cache_dir", str(cache),
         match="Unknown task")


def test_missing_code_file(capsys, cache, tmp_path):
    _bad(capsys, "exec", "--task", TASK, "--code", str(tmp_path / "nope.py"),
         "--cache_dir", str(cache), match="does not exist")


def test_non_utf8_code(capsys, cache, tmp_path):
    code = tmp_path / "latin1.py"
    code.write_bytes("print('caf\xe9')\n".encode("latin-1"))
    _bad(capsys, "exec", "--task", TASK, "--code", str(code), "--cache_dir", str(cache),
         match="not UTF-8")


@pytest.mark.parametrize("content", [b"", b"  \n\n"])
def test_empty_code_file(capsys, cache, tmp_path, content):
    code = tmp_path / "empty.py"
    code.write_bytes(content)
    _bad(capsys, "exec", "--task", TASK, "--code", str(code), "--cache_dir", str(cache),
         match="is empty")


def test_other_bad_input(capsys, cache, tmp_path):
    code = tmp_path / "ok.py"
    code.write_text("print(1)\n")
    _bad(capsys, "exec", "--task", TASK, match="required: --code")
    _bad(capsys, "exec", "--task", TASK, "--code", str(code), "--instrument", "lm",
         "--cache_dir", str(cache), match="policy checkpoint")
    _bad(capsys, "exec", "--task", TASK, "--code", str(code), "--timeout_s", "-1",
         "--cache_dir", str(cache), match="must be positive")
    _bad(capsys, "grade", "--task", TASK, "--submission", str(tmp_path / "none.csv"),
         "--cache_dir", str(cache), match="does not exist")
    _bad(capsys, "frobnicate", match="invalid choice")


def test_module_entry_point_one_json_object(cache, tmp_path):
    code = tmp_path / "sol.py"
    code.write_text(COPY_SAMPLE)
    out = subprocess.run([sys.executable, "-m", "mle_rl", "exec", "--task", TASK, "--code",
                          str(code), "--cache_dir", str(cache)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip().splitlines()) == 1
    assert json.loads(out.stdout)["status"] == "ok"
    out = subprocess.run([sys.executable, "-m", "mle_rl", "exec", "--task", "nope", "--code",
                          str(code)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
