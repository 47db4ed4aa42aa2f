"""`experiments/tie_push.py`: the mean advantage per update from a run's per-family log."""

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import tie_push  # noqa: E402


def test_mean_advantage_and_table(tmp_path):
    # 16 programs: 8 mlp at +0.5 (a tied group pushed up), 8 knn summing to zero
    pushed = {"family/mlp": 0.5, "advantage/mlp": 0.5, "family/knn": 0.5, "advantage/knn": 0.0}
    clean = {"family/mlp": 0.5, "advantage/mlp": 0.25, "family/knn": 0.5, "advantage/knn": -0.25}
    assert tie_push.mean_advantage(pushed) == 0.25
    assert tie_push.mean_advantage(clean) == 0.0
    d = tmp_path / "heldout-glass-type" / "seed1" / "rl"
    d.mkdir(parents=True)
    rows = [clean] * 8 + [pushed] * 2          # 10 updates; the last fifth is pushed
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tie_push.table([str(d / "metrics.jsonl")])
    assert "| heldout-glass-type/seed1 | 10 | 20% | +0.000 → +0.250 |" in out


def test_runs_without_the_family_log_are_not_read_as_untouched(tmp_path):
    d = tmp_path / "duration-synth" / "seed0" / "rl"
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text(json.dumps({"family/mlp": 1.0, "advantage_mean": 0.3}) + "\n")
    out = tie_push.table([str(d / "metrics.jsonl")])
    assert "| duration-synth/seed0 | 1 | not logged" in out
    assert "0%" not in out
