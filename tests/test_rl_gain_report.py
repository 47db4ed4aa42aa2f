"""`launch/rl_gain.sh` (its plan) and `experiments/rl_gain_report.py` on runs written here by
hand, so every number in the report can be checked against the estimator."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import rl_gain_report  # noqa: E402

from mle_rl.agent import best_at_k as bak  # noqa: E402

TASK = "heldout-glass-type"
N = 4


def _ev(scores, modes=None, best=None):
    modes = modes or ["solve"] * len(scores)
    valid = [s for s in scores if s is not None]
    return {TASK: {"metric": "multiclass_log_loss", "is_lower_better": True, "n": len(scores),
                   "valid": len(valid), "best": best if best is not None else min(valid),
                   "sample_submission_score": 1.5, "scores": scores, "modes": modes}}


def _write(d: pathlib.Path, name: str, data) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(json.dumps(data))


@pytest.fixture
def runs(tmp_path):
    out = tmp_path / "runs"
    sft = {0: [0.9, 0.7, None, 0.8], 1: [0.6, 1.9, 0.8, 0.9]}      # 1.9: worse than the floor
    rl = {0: [0.6, 0.65, 0.7, 0.6], 1: [0.55, 0.6, None, 0.62]}
    for s in (0, 1):
        d = out / TASK / f"seed{s}"
        _write(d, "sft.json", _ev(sft[s]))
        _write(d, "rl_eval.json", _ev(rl[s]))
        _write(d, "greedy.json", _ev([0.7] * 6, ["solve"] * 2 + ["improve"] * 4, best=0.58))
        _write(d / "rl", "summary.json", {"updates": 3, "wall_s": 60.0, "actions_done": 2,
                                          "programs_per_hour": 120.0, "best": {TASK: 0.5}})
        rows = [{"step": i + 1, "valid_frac": 1.0, "score_mean_valid": 0.8 - 0.1 * i,
                 "reward_mean": -0.8 + 0.1 * i, "duration_mean_s": 0.5,
                 "family/linear": 0.5, "family/svm": 0.5} for i in range(3)]
        (d / "rl" / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    _write(out / TASK, "sft_pool.json", _ev([0.75, 0.85]))
    _write(out, "rl_gain.json", {"N": N, "seeds": "0 1"})
    return out, sft, rl


def test_report_numbers_are_the_estimator_over_seeds(runs, tmp_path):
    out, sft, rl = runs
    md_path = tmp_path / "res" / "rl_gain.md"
    assert rl_gain_report.main([f"--out_dir={out}", f"--out={md_path}"]) == 0
    md = md_path.read_text()
    for k in (1, 2, 4):
        s = [bak.best_at_k(sft[i], [k], is_lower_better=True, floor=-1.5)[k] for i in (0, 1)]
        r = [bak.best_at_k(rl[i], [k], is_lower_better=True, floor=-1.5)[k] for i in (0, 1)]
        cell = lambda xs: "{:.4f} ± {:.4f}".format(*rl_gain_report.mean_std(xs))  # noqa: E731
        assert f"| {k} | {cell(s)} | {cell(r)} |" in md
    # the header names the runs on disk, not the last invocation's SEEDS
    assert f"Runs on disk: {TASK} seeds 0, 1." in md and "seeds=0 1" not in md
    # RL's curve is below (better than) SFT's at every k: the summary says so
    assert f"| {TASK} | multiclass_log_loss ↓ | yes |" in md
    # equal compute: E = 2, N = 4 -> SFT best@6 from all 10 SFT samples (8 + pool of 2)
    pool = sft[0] + sft[1] + [0.75, 0.85]
    e6 = bak.best_at_k(pool, [6], is_lower_better=True, floor=-1.5)[6]
    assert f"| 0 | 2 | {rl_gain_report.base._fmt(bak.best_at_k(rl[0], [4], is_lower_better=True, floor=-1.5)[4])} | {e6:.4f} | 0.5800 (6 programs) | 0.5000 |" in md
    # the SFT curve from all 10 of its samples (one policy), to k = 10, beside RL's to k = N;
    # RL's mean is at or below (better than) it at every k <= 4, so the summary says yes
    whole = bak.best_at_k(pool, [1, 2, 4, 8, 10], is_lower_better=True, floor=-1.5)
    r1 = rl_gain_report.mean_std([bak.best_at_k(rl[i], [1], is_lower_better=True,
                                                floor=-1.5)[1] for i in (0, 1)])
    assert "| k | SFT best@k, all 10 samples | RL best@k (2 seeds) | RL − SFT |" in md
    assert f"| 1 | {whole[1]:.4f} | {r1[0]:.4f} ± {r1[1]:.4f} | {r1[0] - whole[1]:+.4f} |" in md
    assert f"| 8 | {whole[8]:.4f} | — | — |" in md and f"| 10 | {whole[10]:.4f} | — | — |" in md
    assert f"| {TASK} | multiclass_log_loss ↓ | yes | yes | — | yes |" in md
    files = md_path.parent / "rl_gain_files"
    # 3 updates: the first and the last fifth are one update each (0.8 and 0.6).
    assert "| 0 | 3 | 1.0000 → 1.0000 | 0.8000 → 0.6000 |" in md
    assert (files / f"{TASK}_best_at_k.png").is_file()
    assert (files / f"{TASK}_training.png").is_file()
    assert (files / TASK / "seed1" / "rl" / "metrics.jsonl").is_file()   # kept beside it
    # rebuilt from the kept copy: the same report
    again = tmp_path / "res" / "again.md"
    assert rl_gain_report.main([f"--out_dir={files}", f"--out={again}"]) == 0
    strip = lambda s: [l for l in s.splitlines() if not l.startswith("![")]   # noqa: E731
    assert strip(again.read_text()) == strip(md)


def test_one_seed_has_no_spread_and_the_report_says_so(runs, tmp_path):
    """With one seed the std is not known: "ahead by > 1 std" is neither yes nor no."""
    import shutil
    out, _, _ = runs
    shutil.rmtree(out / TASK / "seed1")
    md_path = tmp_path / "one.md"
    assert rl_gain_report.main([f"--out_dir={out}", f"--out={md_path}"]) == 0
    md = md_path.read_text()
    # (k = 32 is beyond these 4 samples: not measured)
    assert f"| {TASK} | multiclass_log_loss ↓ | yes | — (one seed) | — |" in md
    assert "| 1 | " in md and md.count("| — (one seed) |") >= 3
    assert f"Runs on disk: {TASK} seeds 0." in md
    # a pool whose tail is better than RL's: from all the SFT samples RL is behind at large k
    # (the 4-sample curve of seed 0 alone still says yes)
    _write(out / TASK, "sft_pool.json", _ev([0.2, 0.95, 1.0, 1.1, 1.2, 1.3]))
    assert rl_gain_report.main([f"--out_dir={out}", f"--out={md_path}"]) == 0
    md = md_path.read_text()
    assert f"| {TASK} | multiclass_log_loss ↓ | yes | — (one seed) | — | no |" in md
    assert "| k | SFT best@k, all 10 samples | RL best@k (1 seeds) | RL − SFT |" in md


def test_report_refuses_a_missing_dir(tmp_path):
    assert rl_gain_report.main([f"--out_dir={tmp_path / 'none'}"]) == 2


def test_rl_gain_dry_run_plans_every_step(tmp_path):
    env = dict(os.environ, MLE_RL_CACHE=str(tmp_path / "cache"), JAX_PLATFORMS="cpu",
               OUT=str(tmp_path / "out"), TASKS="heldout-pima-diabetes", SEEDS="0 1",
               STEPS="5", N="16")
    p = subprocess.run(["bash", str(ROOT / "launch" / "rl_gain.sh"), "--dry-run"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert not (tmp_path / "out").exists()
    cmds = [l[2:] for l in p.stdout.splitlines() if l.startswith("+ ")]
    runs = [c for c in cmds if "run.py" in c]
    assert len(runs) == 2 and all("--max_steps=5" in c and "tabular.flags" in c for c in runs)
    evals = [c for c in cmds if "evaluate.py" in c]
    assert sum("--noimprove" in c and "--n=16" in c for c in evals) == 4   # SFT + RL, 2 seeds
    assert all("--sample_batch=16" in c for c in evals)
    # both policies are sampled at the RL runs' own temperature (the flagfile's 1.0) ...
    assert all("--temperature=1.0" in c for c in evals)
    hot = subprocess.run(["bash", str(ROOT / "launch" / "rl_gain.sh"), "--dry-run"], cwd=ROOT,
                         env=dict(env, EXTRA_FLAGS="--temperature=0.9"), capture_output=True,
                         text=True, timeout=120)
    evals = [l for l in hot.stdout.splitlines() if l.startswith("+ ") and "evaluate.py" in l]
    assert evals and all("--temperature=0.9" in c for c in evals)   # ... or the one they ran at
    assert "rl_gain_report.py" in cmds[-1]
    bad = subprocess.run(["bash", str(ROOT / "launch" / "rl_gain.sh"), "--now"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--dry-run" in bad.stderr


def test_rl_gain_tops_up_a_short_sft_pool(tmp_path):
    """Seeds run after the pool can need more SFT samples than it holds: the plan adds a
    top-up with the next seed for exactly the missing ones, and none once there are enough."""
    out, task = tmp_path / "out", "heldout-pima-diabetes"
    d = out / task / "seed0"
    for name in ("sft.json", "rl_eval.json"):
        _write(d, name, {task: {"scores": [0.8] * 16, "modes": ["solve"] * 16}})
    _write(d / "rl", "summary.json", {"actions_done": 40})
    env = dict(os.environ, MLE_RL_CACHE=str(tmp_path / "cache"), JAX_PLATFORMS="cpu",
               OUT=str(out), TASKS=task, SEEDS="0", N="16", GREEDY="0")

    def pool_evals():
        p = subprocess.run(["bash", str(ROOT / "launch" / "rl_gain.sh"), "--dry-run"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        return [l for l in p.stdout.splitlines() if l.startswith("+ ") and "sft_pool" in l]

    # no pool yet: E + N - N = 40 samples, seed 1000
    [first] = pool_evals()
    assert "--seed=1000" in first and "--n=40" in first and f"{task}/sft_pool " in first
    # a pool of 10 solve samples (and 2 improve ones, which do not count): 30 more, seed 1001
    _write(out / task, "sft_pool.json",
           {task: {"scores": [0.8] * 12, "modes": ["solve"] * 10 + ["improve"] * 2}})
    [top] = pool_evals()
    assert "--seed=1001" in top and "--n=30" in top and "sft_pool_1001 " in top
    _write(out / task, "sft_pool_1001.json",
           {task: {"scores": [0.7] * 30, "modes": ["solve"] * 30}})
    assert pool_evals() == []


def test_report_pools_the_top_ups(runs, tmp_path):
    out, _, _ = runs
    _write(out / TASK, "sft_pool_1001.json", _ev([0.1, 0.2, 0.3]))
    md_path = tmp_path / "res" / "top.md"
    assert rl_gain_report.main([f"--out_dir={out}", f"--out={md_path}"]) == 0
    # 2 seeds x 4 + the pool's 2 + the top-up's 3; the copy beside the report keeps the top-up
    assert "SFT best@k, all 13 samples" in md_path.read_text()
    assert (tmp_path / "res" / "top_files" / TASK / "sft_pool_1001.json").is_file()


def test_families_at_evaluation_show_where_the_tail_went(runs, tmp_path):
    """With each sample's family recorded, the report shows each family's share, best and
    mean for SFT and RL, pooled over seeds (invalid programs count in the share only)."""
    out, _, _ = runs
    fams = {"sft": {0: ["svm", "linear", "linear", "knn"], 1: ["svm", "knn", "linear", "svm"]},
            "rl_eval": {0: ["knn"] * 4, 1: ["knn", "knn", "svm", "knn"]}}
    for name, by_seed in fams.items():
        for s, f in by_seed.items():
            p = out / TASK / f"seed{s}" / f"{name}.json"
            ev = json.loads(p.read_text())
            ev[TASK]["sample_families"] = f
            ev[TASK]["policy"] = {"dir": "default", "fingerprint": f"build{s}"}
            p.write_text(json.dumps(ev))
    md_path = tmp_path / "fam.md"
    assert rl_gain_report.main([f"--out_dir={out}", f"--out={md_path}"]) == 0
    md = md_path.read_text()
    assert "Families at evaluation (solve samples pooled over seeds 0, 1" in md
    # SFT svm: 0.9 (seed 0), 0.6 and 0.9 (seed 1) -> 3 of 8, best 0.6, mean 0.8;
    # RL: svm only seed 1's invalid program -> 1 of 8, no valid one
    assert "| svm | 38% | 0.6000 | 0.8000 | 12% | — | — |" in md
    # RL knn: 0.6 0.65 0.7 0.6 0.55 0.6 0.62 -> 7 of 8, best 0.55
    assert "| knn | 25% | 0.8000 | 1.3500 | 88% | 0.5500 | 0.6171 |" in md
    assert "| linear | 38% | 0.7000 | 0.7500 | 0% | — | — |" in md
    # each seed names the SFT policy it started from (a rebuild is another policy)
    assert "programs/h, SFT policy build0; seed 1:" in md and "SFT policy build1" in md


def test_no_family_table_without_recorded_families(runs, tmp_path):
    out, _, _ = runs
    md_path = tmp_path / "plain.md"
    assert rl_gain_report.main([f"--out_dir={out}", f"--out={md_path}"]) == 0
    assert "Families at evaluation" not in md_path.read_text()


def test_drift_table_averages_each_fifth_of_the_updates(tmp_path):
    d = tmp_path / TASK / "seed0"
    _write(d, "sft.json", _ev([0.9, 0.7, 0.8, 0.6]))
    _write(d / "rl", "summary.json", {"updates": 10, "wall_s": 60.0, "actions_done": 20})
    rows = [{"step": i + 1, "kl_ref": 0.1 * i, "entropy": 1.0, "response_tokens": 200 + 10 * i,
             "valid_frac": 1.0 if i < 8 else None} for i in range(10)]
    (d / "rl" / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    table = rl_gain_report.drift_table(rl_gain_report.Task(tmp_path / TASK))
    assert "| 0 | KL to the SFT policy (per token) | 0.050 → 0.250 → 0.450 → 0.650 → 0.850 |" \
        in table
    assert "| 0 | response tokens per batch | 205 → 225 → 245 → 265 → 285 |" in table
    # the last fifth logged no valid fraction: it shows as a dash, not as a zero
    assert "| 0 | valid fraction | 1.000 → 1.000 → 1.000 → 1.000 → — |" in table
    short = tmp_path / "short" / TASK / "seed0"
    _write(short, "sft.json", _ev([0.9]))
    (short / "rl").mkdir()
    (short / "rl" / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert rl_gain_report.drift_table(rl_gain_report.Task(tmp_path / "short" / TASK)) == ""


def test_each_seed_shows_where_its_policy_went(runs, tmp_path):
    """Per seed: the leading training family in each third of the updates and the two
    leading families at evaluation, each with its best valid program."""
    out, _, _ = runs
    d = out / TASK / "seed1"
    rows = [{"step": i + 1, "family/linear": 0.75 - 0.25 * i, "family/svm": 0.25 + 0.25 * i}
            for i in range(3)]
    (d / "rl" / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    for s, fams in {0: ["knn", "knn", "svm", "knn"], 1: ["svm", "knn", "svm", "svm"]}.items():
        p = out / TASK / f"seed{s}" / "rl_eval.json"
        ev = json.loads(p.read_text())
        ev[TASK]["sample_families"] = fams
        p.write_text(json.dumps(ev))
    table = rl_gain_report.family_by_seed(rl_gain_report.Task(out / TASK))
    # seed 0's training shares tie (linear 50%, svm 50%): the first in name order leads
    assert "| 0 | linear 50% → linear 50% → linear 50% | knn 75% (best 0.6000), " \
           "svm 25% (best 0.7000) |" in table
    # seed 1 moves from linear to svm; at evaluation its svm samples are 0.55, None, 0.62
    assert "| 1 | linear 75% → linear 50% → svm 75% | svm 75% (best 0.5500), " \
           "knn 25% (best 0.6000) |" in table


def test_the_report_names_the_sampling_temperature_and_flags_a_mismatch(runs, tmp_path):
    out, _, _ = runs
    md_path = tmp_path / "t.md"
    assert rl_gain_report.main([f"--out_dir={out}", f"--out={md_path}"]) == 0
    assert "solve samples of each policy (temperature 0.7);" in md_path.read_text()
    for s in (0, 1):                       # RL evaluated hotter than SFT: not comparable
        p = out / TASK / f"seed{s}" / "rl_eval.json"
        ev = json.loads(p.read_text())
        ev[TASK]["sampling"] = {"temperature": 1.0, "top_p": 1.0, "seed": s}
        p.write_text(json.dumps(ev))
    assert rl_gain_report.main([f"--out_dir={out}", f"--out={md_path}"]) == 0
    assert "**SFT sampled at temperature 0.7, RL at 1: not the same sampling" in \
        md_path.read_text()
    for s in (0, 1):
        p = out / TASK / f"seed{s}" / "sft.json"
        ev = json.loads(p.read_text())
        ev[TASK]["sampling"] = {"temperature": 1.0, "top_p": 1.0, "seed": s}
        p.write_text(json.dumps(ev))
    assert rl_gain_report.main([f"--out_dir={out}", f"--out={md_path}"]) == 0
    assert "solve samples of each policy (temperature 1);" in md_path.read_text()


def test_seeds_of_two_sft_policies_are_compared_each_with_its_own(runs, tmp_path):
    """Two builds of one source can be two policies: each seed's RL is compared with its own
    policy's samples (equal compute too), and samples of different policies never pool."""
    out, sft, rl = runs
    for path, fp in ((out / TASK / "seed0" / "sft.json", "build0"),
                     (out / TASK / "seed1" / "sft.json", "build1"),
                     (out / TASK / "sft_pool.json", "build0")):
        ev = json.loads(path.read_text())
        ev[TASK]["policy"] = {"dir": "default", "fingerprint": fp}
        path.write_text(json.dumps(ev))
    md_path = tmp_path / "mixed.md"
    assert rl_gain_report.main([f"--out_dir={out}", f"--out={md_path}"]) == 0
    md = md_path.read_text()
    # seed 0: its 4 samples and the pool's 2 (one policy) cover E + N = 6; seed 1's 4 do not
    e6 = bak.best_at_k(sft[0] + [0.75, 0.85], [6], is_lower_better=True, floor=-1.5)[6]
    assert f"| {e6:.4f} | 0.5800 (6 programs) |" in md
    assert "| 1 | 2 | " in md and "— (4 SFT samples < E+N) |" in md
    assert "SFT best@k, all" not in md                         # no pooled curve across builds
    assert f"| {TASK} | multiclass_log_loss ↓ | yes | yes | — | — (2 SFT policies) |" in md
    assert "The seeds started from 2 SFT policies (seed 0: build0, seed 1: build1;" in md
    t = rl_gain_report.Task(out / TASK)
    assert t.policies == ["build0", "build1"] and t.sft_all == []
    assert t.sft_samples_of(1) == sft[1] and t.sft_samples_of(0) == sft[0] + [0.75, 0.85]
