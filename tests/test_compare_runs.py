"""`experiments/compare_runs.py`: two rl_gain.sh folders side by side, seed by seed."""

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import compare_runs  # noqa: E402

TASK = "heldout-glass-type"


def _eval(scores, temperature=1.0):
    return {TASK: {"metric": "multiclass_log_loss", "is_lower_better": True,
                   "sample_submission_score": 2.0, "scores": scores,
                   "modes": ["solve"] * len(scores), "sampling": {"temperature": temperature}}}


def _run(root, seed, valid, pushed, scores, bad=3, temperature=1.0, sft=None):
    d = root / TASK / f"seed{seed}"
    (d / "rl").mkdir(parents=True)
    rows = [{"valid_frac": v, "entropy": 1.0, "kl_loss": 0.1,
             "family/mlp": 1.0, "advantage/mlp": 0.5 if p else 0.0}
            for v, p in zip(valid, pushed)]
    (d / "rl" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "rl" / "summary.json").write_text(json.dumps(
        {"updates": len(rows), "programs_per_hour": 2400.0, "actions_done": 100,
         "statuses": {"ok": 100 - bad, "bad_format": bad}}))
    (d / "rl_eval.json").write_text(json.dumps(_eval(scores, temperature)))
    if sft is not None:
        (d / "sft.json").write_text(json.dumps(_eval(sft)))


def test_compare_pairs_the_seeds_trained_in_both(tmp_path):
    a, b = tmp_path / "fixed", tmp_path / "old"
    # seed 0 in both; seed 1 only in the old folder: not compared
    _run(a, 0, [1.0] * 5 + [0.5] * 5, [False] * 10, [0.5, 1.0], bad=2, sft=[0.8, None])
    _run(b, 0, [0.8] * 10, [False] * 8 + [True] * 2, [0.6, None], bad=7)
    _run(b, 1, [0.8] * 10, [False] * 10, [0.6, 0.7])
    out = compare_runs.compare(a, b, ("fixed", "old"))
    assert "## heldout-glass-type, seed0" in out and "seed1" not in out
    assert "| valid fraction per update | 1.000 → 0.500 | 0.800 → 0.800 |" in out
    assert "| updates with a tie push (`tie_push.py`) | 0% | 20% |" in out
    assert "| `bad_format` programs over the run | 2 of 100 | 7 of 100 |" in out
    assert "| updates, programs per hour | 10, 2,400 | 10, 2,400 |" in out
    assert "temperature 1.0:" in out
    # best@1 is the mean, an invalid program counting as the sample submission (2.0);
    # best@2 of two samples is their best
    assert "| 1 | 1.4000 | 0.7500 | 1.3000 |" in out
    assert "| 2 | 0.8000 | 0.5000 | 0.6000 |" in out
    assert "| valid solve samples | 1 of 2 | 2 of 2 | 1 of 2 |" in out


def test_compare_names_differing_temperatures_and_missing_pairs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _run(a, 0, [1.0] * 5, [False] * 5, [0.5, 1.0], temperature=0.7)
    _run(b, 0, [1.0] * 5, [False] * 5, [0.5, 1.0], temperature=1.0)
    out = compare_runs.compare(a, b, ("A", "B"))
    assert "temperatures differ or are unrecorded: —, 0.7, 1.0" in out
    _run(tmp_path / "c", 3, [1.0], [False], [0.5])
    assert compare_runs.compare(a, tmp_path / "c", ("A", "C")).startswith("No <task>/seed<k>")
    with pytest.raises(SystemExit):
        compare_runs.main([str(a), str(b), "--names=only_one"])


def test_runs_of_different_lengths_are_also_compared_over_their_shared_updates(tmp_path):
    a, b = tmp_path / "slow", tmp_path / "fast"
    # the slow machine logged 10 updates; the fast one 20, its format eroding after update 10
    _run(a, 0, [1.0] * 2 + [0.9] * 8, [False] * 10, [0.5, 1.0])
    _run(b, 0, [1.0] * 2 + [0.9] * 8 + [0.5] * 10, [True] * 5 + [False] * 15, [0.5, 1.0])
    out = compare_runs.compare(a, b, ("slow", "fast"))
    assert "| valid fraction per update | 1.000 → 0.900 | 0.950 → 0.500 |" in out
    assert "The runs logged 10 and 20 updates; over the first 10 of each:" in out
    assert "| valid fraction per update | 1.000 → 0.900 | 1.000 → 0.900 |" in out
    assert "| updates with a tie push (`tie_push.py`) | 0% | 50% |" in out
    # the whole-run cells stay the runs' own
    assert "| updates, programs per hour | 10, 2,400 | 20, 2,400 |" in out
    # equal lengths: no second table
    c = tmp_path / "same"
    _run(c, 0, [1.0] * 10, [False] * 10, [0.5, 1.0])
    assert "over the first" not in compare_runs.compare(a, c, ("A", "C"))
