"""`experiments/family_tails.py`: best@k per model family from evaluate.py's samples."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import family_tails  # noqa: E402

# Two families: "steady" always scores 0.80; "wild" scores 0.60 or 0.90 (and fails once).
# Each alone: best@1 steady 0.80 > wild; best@4 wild wins (any 0.90 among its draws).
STEADY = [("linear", 0.80)] * 4
WILD = [("mlp", 0.60), ("mlp", 0.90), ("mlp", 0.60), ("mlp", None)]


def _eval(samples, lower=False, baseline=0.5, improve=()):
    fams = [f for f, _ in samples] + [f for f, _ in improve]
    scores = [s for _, s in samples] + [s for _, s in improve]
    return {"metric": "auc", "is_lower_better": lower, "sample_submission_score": baseline,
            "sample_families": fams, "scores": scores,
            "modes": ["solve"] * len(samples) + ["improve"] * len(improve)}


def test_each_family_gets_its_own_best_at_k_with_the_shared_floor():
    ev = _eval(STEADY + WILD, improve=[("mlp", 0.99)])      # improve samples are not draws
    floor = family_tails.common_floor([ev])
    assert floor == 0.5
    table = family_tails.family_table(ev, floor, [1, 2, 4])
    assert table["linear"]["n"] == 4 and table["linear"]["share"] == 0.5
    assert table["linear"]["best_at_k"] == pytest.approx({1: 0.8, 2: 0.8, 4: 0.8})
    mlp = table["mlp"]
    assert mlp["valid"] == 3 and mlp["mean"] == pytest.approx(0.7)
    # sorted values 0.5 (the failure at the floor), 0.6, 0.6, 0.9: best@1 is their mean,
    # best@2 = (1*0.6 + 2*0.6 + 3*0.9) / 6, best@4 = the top one
    assert mlp["best_at_k"][1] == pytest.approx(0.65)
    assert mlp["best_at_k"][2] == pytest.approx(0.75)
    assert mlp["best_at_k"][4] == pytest.approx(0.9)
    assert family_tails.top_family(table, 1, False) == "linear"
    assert family_tails.top_family(table, 4, False) == "mlp"
    assert family_tails.top_family(table, 8, False) is None     # no family has 8 samples


def test_lower_is_better_flips_the_top_family_and_prints_raw_scores():
    flip = [(f, None if s is None else 1.0 - s) for f, s in STEADY + WILD]
    ev = _eval(flip, lower=True, baseline=0.5)
    table = family_tails.family_table(ev, family_tails.common_floor([ev]), [1, 4])
    assert table["mlp"]["best_at_k"][4] == pytest.approx(0.1)   # the raw log-loss-like score
    assert family_tails.top_family(table, 1, True) == "linear"
    assert family_tails.top_family(table, 4, True) == "mlp"
    text = family_tails.render([ev], ["sft"])
    assert "lower is better" in text and "invalid = 0.5000" in text
    assert text.endswith("@1 linear, @2 linear, @4 mlp")


def _write(root, seed, sft, rl):
    d = root / "heldout-pima-diabetes" / f"seed{seed}"
    d.mkdir(parents=True)
    (d / "sft.json").write_text(json.dumps({"heldout-pima-diabetes": sft}))
    (d / "rl_eval.json").write_text(json.dumps({"heldout-pima-diabetes": rl}))


def test_runs_name_the_sft_top_family_and_rl_commonest(tmp_path):
    _write(tmp_path, 0, _eval(STEADY + WILD), _eval(STEADY * 2))
    old = _eval(STEADY)
    del old["sample_families"]
    _write(tmp_path, 1, old, old)
    lines = family_tails.runs_lines(tmp_path, 4)
    assert lines[2] == ("| heldout-pima-diabetes | seed0 | mlp (0.9000) | linear (100%) | "
                        "@8 0.9000 | @8 0.8000 |")
    assert "no per-sample families" in lines[3]


def test_cli_bad_input_is_one_clear_line(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "experiments/family_tails.py", *a],  # noqa
                                    cwd=ROOT, capture_output=True, text=True, timeout=120)
    r = run(str(tmp_path / "missing.json"))
    assert r.returncode != 0 and "no such file" in r.stderr and "Traceback" not in r.stderr
    r = run(f"--runs={tmp_path / 'none'}")
    assert r.returncode != 0 and "no folder" in r.stderr and "Traceback" not in r.stderr


def test_credit_is_a_gradient_on_family_logits_whatever_the_units():
    """Linear programs within 0.003 of each other, MLPs at 0.70 or 0.95, knn always last:
    the credits on the family logits sum to zero; the family that holds the top scores
    gains and the one that never wins loses, on both scales; and neither scale depends on
    the metric's units or direction (scores x -10 with lower better give the same)."""
    lin = [("linear", 0.800 + 0.001 * (i % 4)) for i in range(16)]
    mlp = [("mlp", 0.95 if i % 4 == 0 else 0.70) for i in range(8)]
    knn = [("knn", 0.60)] * 8
    c = family_tails.credit_table(_eval(lin + mlp + knn), k=4, group=4, draws=1024)
    for scale in ("group", "scores", "run"):
        assert sum(c[scale].values()) == pytest.approx(0.0, abs=1e-4)
        assert c[scale]["mlp"] > 0 > c[scale]["knn"]
    ten = _eval([(f, -10 * s) for f, s in lin + mlp + knn], lower=True, baseline=-5.0)
    c10 = family_tails.credit_table(ten, k=4, group=4, draws=1024)
    for scale in ("group", "scores", "run"):
        for f in ("linear", "mlp", "knn"):
            assert c10[scale][f] == pytest.approx(c[scale][f], rel=1e-3, abs=1e-3)
