"""`experiments/evaluate.py`: best-of-N evaluation from the command line (random tiny policy,
so it runs anywhere; the scores themselves are not the point here)."""

import json
import os
import subprocess
import sys

import pytest

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
    # which policy it was: the random one, named by its parameters
    assert row["policy"]["dir"] == "random" and len(row["policy"]["fingerprint"]) == 12
    # and how it was sampled (a temperature is part of what was measured)
    assert row["sampling"] == {"temperature": 0.7, "top_p": 1.0, "seed": 0}
    # each sample's family, in the samples' order: the counts are theirs
    assert len(row["sample_families"]) == 2
    assert {f: row["sample_families"].count(f) for f in row["sample_families"]} == row["families"]
    table = out.with_suffix(".md").read_text()
    assert "| tabular-synth | auc" in table
    # every sample's score is kept; best@k over the solve samples (sample submission 0.5 as
    # the floor of an invalid program)
    assert len(row["scores"]) == len(row["modes"]) == 2 and row["n_solve"] >= 1
    assert set(row["best_at_k"]) <= {"1", "2"} and "1" in row["best_at_k"]
    assert all(v >= 0.5 for v in row["best_at_k"].values())
    assert "best@k over the solve samples" in table


def test_evaluate_greedy_search_and_best_at_k_plot(tmp_path):
    """--search=greedy runs --n programs (drafts first); --plot draws this evaluation's
    best@k beside an earlier one's (--compare)."""
    first = tmp_path / "first"
    common = ["--policy_dir=random", "--tasks=tabular-synth", "--max_new_tokens=8",
              "--max_prompt_tokens=1536", "--num_actors=1", "--sample_batch=2",
              f"--cache_dir={tmp_path / 'cache'}"]
    proc = evaluate(*common, "--n=2", "--noimprove", f"--out={first}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    png = tmp_path / "curves.png"
    proc = evaluate(*common, "--n=4", "--search=greedy", f"--out={tmp_path / 'greedy'}",
                    f"--plot={png}", f"--compare=first:{first}.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads((tmp_path / "greedy.json").read_text())["tabular-synth"]
    assert row["n"] == 4 and row["modes"][:2] == ["solve", "solve"]
    assert "[eval] tabular-synth: 2/4 programs, valid " in proc.stdout   # progress, flushed
    assert png.is_file() and png.stat().st_size > 1000


def test_evaluate_bad_input(tmp_path):
    proc = evaluate("--dtype=float16")
    assert proc.returncode != 0 and "--dtype" in proc.stderr
    proc = evaluate("--tasks=no-such-task", f"--cache_dir={tmp_path}")
    assert proc.returncode == 2 and "Unknown task 'no-such-task'" in proc.stderr
    proc = evaluate("--policy_dir=random", "--tasks=tabular-synth", "--max_prompt_tokens=64",
                    f"--cache_dir={tmp_path}")
    assert proc.returncode == 2 and "too small" in proc.stderr.splitlines()[-1]


def test_evaluate_a_user_task_with_its_baseline(tmp_path):
    """`--task_dir`: a held-out task of the user layout is evaluated, and its JSON row
    carries the sample submission's own score (the uninformed baseline)."""
    from mle_rl.env.procedural import heldout

    heldout.write_all(tmp_path / "mine", cache=tmp_path / "cache")
    out = tmp_path / "eval"
    proc = evaluate("--policy_dir=random", "--tasks=heldout-pima-diabetes", "--n=2",
                    "--max_new_tokens=8", "--max_prompt_tokens=1536", "--num_actors=1",
                    "--sample_batch=2",
                    f"--task_dir={tmp_path / 'mine'}", f"--cache_dir={tmp_path / 'cache'}",
                    f"--out={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(out.with_suffix(".json").read_text())["heldout-pima-diabetes"]
    assert row["metric"] == "auc" and row["n"] == 2
    assert row["sample_submission_score"] == 0.5      # a constant probability ranks nothing
    assert row["beats_sample_submission"] is (row["best"] is not None and row["best"] > 0.5)
    assert "| heldout-pima-diabetes | auc ↑ | " in out.with_suffix(".md").read_text()


def test_trained_prompt_budgets(tmp_path):
    from mle_rl.warmstart.states import trained_prompt_budgets

    from mle_rl.warmstart.states import WarmStartRecordError

    assert trained_prompt_budgets(tmp_path) is None          # not a warm-start policy
    (tmp_path / "warmstart.json").write_text(json.dumps(
        {"settings": {"budgets": {"solve_prompt": 128, "improve_prompt": 512}}}))
    assert trained_prompt_budgets(tmp_path) == {"solve": 128, "improve": 512}
    for text, why in (("{not json", "not readable as JSON"),
                      (json.dumps({"format": 2, "settings": {}}), "format 2"),
                      (json.dumps({"settings": {"sft": {}}}), "no settings.budgets")):
        (tmp_path / "warmstart.json").write_text(text)
        with pytest.raises(WarmStartRecordError, match=why) as e:
            trained_prompt_budgets(tmp_path)
        assert str(tmp_path / "warmstart.json") in str(e.value) and "\n" not in str(e.value)
