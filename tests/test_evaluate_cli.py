"""`experiments/evaluate.py`: best-of-N evaluation from the command line (random tiny policy,
so it runs anywhere; the scores themselves are not the point here)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "experiments", "evaluate.py")


def evaluate(*flags, timeout=600):
    return subprocess.run([sys.executable, SCRIPT, *flags], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_evaluate_random_policy_writes_table(tmp_path):
    dtype = "bfloat16"
    out = tmp_path / "eval" / "r"
    proc = evaluate("--policy_dir=random", "--tasks=tabular-synth", "--n=2",
                    "--max_new_tokens=16", "--max_prompt_tokens=1536", "--num_actors=1",
                    "--sample_batch=2", f"--cache_dir={tmp_path / 'cache'}", f"--dtype={dtype}",
                    f"--out={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"parameters, {dtype})" in proc.stdout            # the policy really is bfloat16
    got = json.loads(out.with_suffix(".json").read_text())
    row = got["tabular-synth"]
    assert row["n"] == 2 and 0 <= row["valid"] <= 2 and row["metric"] == "auc"
    assert sum(row["families"].values()) == 2
    table = out.with_suffix(".md").read_text()
    assert "| tabular-synth | auc" in table


def test_evaluate_bad_input(tmp_path):
    proc = evaluate("--dtype=float16")
    assert proc.returncode != 0 and "--dtype" in proc.stderr
    proc = evaluate("--tasks=no-such-task", f"--cache_dir={tmp_path}")
    assert proc.returncode == 2 and "Unknown task 'no-such-task'" in proc.stderr
