"""The reproduction scripts in launch/ (table1, ablations, cpu_demo) and their report.

The end-to-end tests run the paper scripts on a tiny stand-in, so they are known to work
before anyone spends GPU days on them: a random `micro` Qwen2 saved as an HF checkpoint
with a real byte-level BPE tokenizer (chat template included, as Qwen's), and a synthetic
random-acts-of-pizza laid out as `mlebench prepare` leaves it. The random model writes no
code, so our column must say "no valid submission"; these tests check the plumbing, not
learning. The paper flagfiles ask for --instrument=lm, which the trainer does not have yet,
so the stand-in runs pass --instrument=ast (and small batches) through EXTRA_FLAGS.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import report  # noqa: E402

TASK = "random-acts-of-pizza"
FAST = ("--batch_size=2 --sample_batch=2 --max_in_flight=2 --num_actors=1 --critic=shared "
        "--max_new_tokens=24 --max_prompt_tokens=2000 --warm_pool=false --dtype=float32 "
        "--fsdp=false --tensorboard=false --checkpoint_every=1 --instrument=ast")


# ----------------------------------------------------------------------------- stand-ins


def make_standin_checkpoint(path: pathlib.Path) -> pathlib.Path:
    """A random `micro` Qwen2 in HF format with a trained byte-level BPE beside it."""
    from mle_rl.models import config as mcfg, hf, qwen2
    from mle_rl.warmstart import tokenizer as wtok
    texts = ["import pandas as pd\nfrom sklearn.linear_model import LogisticRegression\n",
             "train = pd.read_csv('input/train.csv')\nsub.to_csv('submission.csv', index=False)\n",
             "Predict requester_received_pizza for each request_id.\n"] * 10
    cfg = mcfg.micro()
    tok = wtok.train(texts, vocab_size=cfg.vocab_size - 100, min_frequency=1)
    assert len(tok) <= cfg.vocab_size
    return hf.save(qwen2.init_model(cfg, seed=0), path, tokenizer=tok)


def make_standin_mlebench(root: pathlib.Path) -> pathlib.Path:
    """A synthetic random-acts-of-pizza in the MLE-bench layout, and a spooky-author-
    identification prepared without its answers file (so it must be reported missing)."""
    prepared = root / TASK / "prepared"
    pub, priv = prepared / "public", prepared / "private"
    pub.mkdir(parents=True)
    priv.mkdir(parents=True)
    rng = np.random.default_rng(0)
    words = np.array(["please", "hungry", "pizza", "broke", "kids", "student", "thanks"])

    def rows(n, start):
        ids = [f"t3_{start + i:05d}" for i in range(n)]
        text = [" ".join(rng.choice(words, 6)) for _ in range(n)]
        y = np.array([("kids" in t) or rng.random() < 0.2 for t in text], dtype=int)
        y[:2] = [0, 1]                                   # both classes, so AUC is defined
        return ids, text, y

    ids, text, y = rows(40, 0)
    pd.DataFrame({"request_id": ids, "request_text": text,
                  "requester_received_pizza": y}).to_csv(pub / "train.csv", index=False)
    ids, text, y = rows(20, 100)
    pd.DataFrame({"request_id": ids, "request_text": text}).to_csv(pub / "test.csv", index=False)
    pd.DataFrame({"request_id": ids, "requester_received_pizza": 0.5}).to_csv(
        pub / "sample_submission.csv", index=False)
    pd.DataFrame({"request_id": ids, "requester_received_pizza": y}).to_csv(
        priv / "test.csv", index=False)
    (prepared / "description.md").write_text(
        "# Random Acts of Pizza (synthetic stand-in)\n\nPredict the probability of "
        "`requester_received_pizza` for each `request_id` of test.csv; write submission.csv.\n")
    (root / "spooky-author-identification" / "prepared" / "public").mkdir(parents=True)
    (root / "spooky-author-identification" / "prepared" / "private").mkdir(parents=True)
    return root


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    base = tmp_path_factory.mktemp("standin")
    return {"ckpt": make_standin_checkpoint(base / "ckpt"),
            "mle": make_standin_mlebench(base / "mlebench"), "cache": base / "cache"}


def _script(name, env_vars, cache, args=(), timeout=1800):
    env = dict(os.environ, MLE_RL_CACHE=str(cache), JAX_PLATFORMS="cpu",
               **{k: str(v) for k, v in env_vars.items()})
    env.pop("XLA_FLAGS", None)               # one CPU device, as a user's run
    return subprocess.run(["bash", str(ROOT / "launch" / name), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _row(md: str, task: str) -> list:
    line = next(l for l in md.splitlines() if l.startswith(f"| {task} |"))
    return [c.strip() for c in line.strip("|").split("|")]


# ----------------------------------------------------------------------------- table1


def test_paper_numbers_match_design_and_flagfiles():
    assert report.paper_tasks() == report.PAPER            # a flagfile for every paper task
    for t, score in report.PAPER.items():
        first = (ROOT / "experiments" / "paper" / f"{t}.flags").read_text().splitlines()[0]
        assert re.search(rf":\s*{re.escape(str(score))}\.?\s*$", first), (t, first)


def test_table1_without_data_or_weights_lists_what_to_prepare_and_exits_0(tmp_path):
    out = tmp_path / "out"
    p = _script("table1.sh", {"MLEBENCH_DIR": tmp_path / "none", "OUT": out,
                              "BASE_CKPT": tmp_path / "no-ckpt"}, tmp_path / "cache")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert p.stdout.strip().endswith(f"table: {out}/table1.md")
    md = (out / "table1.md").read_text()
    for t, score in report.PAPER.items():
        row = _row(md, t)
        assert row[2] == f"{score:.3f}" and row[3] == "not run"
        assert row[-1] == "missing: weights, data"
        assert f"`mlebench prepare -c {t} --data-dir {tmp_path / 'none'}`" in md
        assert f"mlebench prepare -c {t}" in p.stderr
    assert md.count("huggingface-cli download Qwen/Qwen2.5-3B-Instruct") == 1
    assert "huggingface-cli download" in p.stderr
    assert not (out / TASK).exists()                           # nothing was run


def test_table1_unknown_task_is_one_clear_error(tmp_path):
    p = _script("table1.sh", {"TASKS": "not-a-task", "OUT": tmp_path}, tmp_path / "cache")
    assert p.returncode == 2
    assert "no paper flagfile for not-a-task" in p.stderr


@pytest.mark.slow
def test_table1_end_to_end_on_the_standin(standin, tmp_path):
    out = tmp_path / "table1"
    p = _script("table1.sh", {"MLEBENCH_DIR": standin["mle"], "BASE_CKPT": standin["ckpt"],
                              "OUT": out, "STEPS": 1, "N": 2, "EXTRA_FLAGS": FAST},
                standin["cache"])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.strip().endswith(f"table: {out}/table1.md")
    run = out / TASK / "run"
    assert json.loads((run / "summary.json").read_text())["updates"] == 1
    assert (run / "policy" / "config.json").is_file()
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["model"]["policy_dir"] == str(standin["ckpt"])  # the base checkpoint, trained
    assert cfg["sampling"]["max_new_tokens"] == 24             # EXTRA_FLAGS beat the flagfile
    ev = json.loads((out / TASK / "eval.json").read_text())[TASK]
    assert ev["n"] == 2 and ev["metric"] == "auc"
    md = (out / "table1.md").read_text()
    row = _row(md, TASK)
    assert row[1] == "auc ↑" and row[2] == "0.663" and row[-1] == "ok"
    ours = "no valid submission (0/2 valid)" if ev["best"] is None else f"{ev['best']:.4f}"
    assert row[3] == ours and row[4] == f"{ev['valid']}/2"
    assert row[6].startswith("1 (")                            # 1 RL update, with its wall time
    assert _row(md, "spooky-author-identification")[-1] == "missing: answers"
    for t in set(report.PAPER) - {TASK, "spooky-author-identification"}:
        assert _row(md, t)[-1] == "missing: data" and _row(md, t)[3] == "not run"
    assert "huggingface-cli" not in md                         # the checkpoint is there


# ----------------------------------------------------------------------------- ablations


def test_ablations_reject_an_unknown_variant(tmp_path):
    p = _script("ablations.sh", {"VARIANTS": "full no_luck", "OUT": tmp_path / "a"},
                tmp_path / "cache")
    assert p.returncode == 2 and "unknown variant 'no_luck'" in p.stderr
    assert not (tmp_path / "a").exists()


def test_ablations_keep_every_invocation_s_settings_and_refuse_a_second_task(tmp_path):
    """Runs of one OUT are often started seed by seed: ablations.json keeps each start's
    settings (the base checkpoint and extra flags too), and another task is refused before
    anything runs. The task here is unknown, so each training fails at once."""
    out, cache = tmp_path / "a", tmp_path / "cache"
    for s, extra in (("0", "--instrument=ast"), ("1", "--nogrpo_std")):
        p = _script("ablations.sh", {"TASK": "no-such-task", "VARIANTS": "full", "SEEDS": s,
                                     "OUT": out, "BASE_CKPT": tmp_path / "base",
                                     "EXTRA_FLAGS": extra}, cache)
        assert p.returncode == 1 and "training FAILED" in p.stdout, p.stdout + p.stderr
    meta = json.loads((out / "ablations.json").read_text())
    assert meta["task"] == "no-such-task"
    assert [(r["seeds"], r["extra_flags"]) for r in meta["runs"]] == [
        ("0", "--instrument=ast"), ("1", "--nogrpo_std")]
    assert {r["base_ckpt"] for r in meta["runs"]} == {str(tmp_path / "base")}
    before = (out / "ablations.json").read_text()
    p = _script("ablations.sh", {"TASK": "other-task", "VARIANTS": "full", "OUT": out}, cache)
    assert p.returncode == 2 and "holds the ablations of task 'no-such-task'" in p.stderr
    assert (out / "ablations.json").read_text() == before
    assert not (out / "full" / "seed2").exists()              # nothing ran


@pytest.mark.slow
def test_ablations_end_to_end_on_the_standin(standin, tmp_path):
    out = tmp_path / "abl"
    p = _script("ablations.sh", {"TASK": TASK, "MLEBENCH_DIR": standin["mle"],
                                 "BASE_CKPT": standin["ckpt"], "OUT": out, "SEEDS": "0",
                                 "STEPS": 1, "N": 2, "EXTRA_FLAGS": FAST}, standin["cache"])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.strip().endswith(f"table: {out}/ablations.md")
    switched = {"full": {}, "no_duration_weights": {("ppo", "duration_weights"): False},
                "no_instrumentation": {("env", "instrument"): "none"},
                "no_self_improve": {("env", "self_improve"): 0.0}}
    for v, changes in switched.items():
        cfg = json.loads((out / v / "seed0" / "run" / "config.json").read_text())
        expect = {("ppo", "duration_weights"): True, ("env", "instrument"): "ast",
                  ("env", "self_improve"): 0.5, **changes}
        for (sec, key), val in expect.items():
            assert cfg[sec][key] == val, (v, sec, key)
        assert cfg["max_steps"] == 1 and cfg["seed"] == 0       # the same budget
    md = (out / "ablations.md").read_text()
    for v, paper in (("no_duration_weights", "-3.85%"), ("no_instrumentation", "-22.06%"),
                     ("no_self_improve", "-8.00%")):
        row = _row(md, v)
        ev = json.loads((out / v / "seed0" / "eval.json").read_text())[TASK]
        best = ev["best"] if ev["best"] is not None else ev.get("sample_submission_score")
        assert row[1] == ("—" if best is None else f"{best:.4f}")     # invalid: the sample's
        at1 = ev.get("best_at_k", {}).get("1")
        assert row[2] == ("—" if at1 is None else f"{at1:.4f}")
        assert row[3] == f"{int(ev['best'] is not None)}/1" and row[5] == paper
    assert _row(md, "full")[5] == "—"


# ----------------------------------------------------------------------------- cpu demo


def test_cpu_demo_dry_run_prints_the_plan_and_runs_nothing(tmp_path):
    out, rep = tmp_path / "demo", tmp_path / "cpu_demo.md"
    p = _script("cpu_demo.sh", {"OUT": out, "REPORT": rep, "SEEDS": "0 1"}, tmp_path / "cache",
                args=["--dry-run"])
    assert p.returncode == 0, p.stderr[-2000:]
    assert not out.exists() and not rep.exists()
    cmds = [l[2:] for l in p.stdout.splitlines() if l.startswith("+ ")]
    assert cmds[0].startswith("bash launch/warm_start.sh")
    assert "mle_rl.env.procedural.heldout" in cmds[1]
    per_task = [c for c in cmds if "/cross/" not in c and "/ablations/" not in c]
    trained = [re.search(r"--tasks=(\S+)", c).group(1) for c in per_task if "run.py" in c]
    assert len(trained) == 8 and all(t.startswith("heldout-") for t in trained)  # 4 x 2 seeds
    for t in set(trained):
        for s in (0, 1):
            mine = [c for c in per_task if f"--tasks={t} " in c + " " and f"--seed={s} " in c]
            assert "--policy_dir=default" in mine[0] and "--n=32" in mine[0]  # SFT, seed s
            assert "run.py" in mine[1] and "--max_steps=30" in mine[1]
            assert f"--policy_dir={out}/{t}/seed{s}/rl/policy" in mine[2] and "--n=32" in mine[2]
            assert all(f"--task_dir={out}/heldout_tasks" in c for c in mine)
    cross = [c for c in cmds if "/cross/" in c and "run.py" in c]
    assert len(cross) == 2 and all("--max_steps=60" in c for c in cross)
    assert sum("evaluate.py" in c and "/cross/seed0/after_" in c for c in cmds) == 4
    abl = [c for c in cmds if "run.py" in c and "/ablations/" in c]
    assert len(abl) == 4 and all("--tasks=heldout-pima-diabetes" in c for c in abl)
    assert any("--duration_weights=false" in c for c in abl)
    assert any("--instrument=none" in c for c in abl)
    assert "report.py cpu_demo" in cmds[-1] and f"--out={rep}" in cmds[-1]
    env_run = _script("cpu_demo.sh", {"OUT": out, "REPORT": rep, "DRY_RUN": 1, "SEEDS": "0 1"},
                      tmp_path / "cache")
    assert env_run.returncode == 0 and env_run.stdout == p.stdout


# ----------------------------------------------------------------------------- report


def _fake_run(d: pathlib.Path, task, best, fams_per_step, lower=False, dur=1.0):
    (d / "run").mkdir(parents=True)
    rows = [{"step": i + 1, "reward_mean": -10 + i, "duration_mean_s": dur,
             **{f"family/{k}": v for k, v in f.items()}} for i, f in enumerate(fams_per_step)]
    (d / "run" / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (d / "run" / "summary.json").write_text(json.dumps(
        {"updates": len(rows), "wall_s": 10.0, "stopped_by": "max_wall_s", "best": {},
         "families": {"linear": 3, "gradient_boosting": 1}}))
    (d / "eval.json").write_text(json.dumps({task: {
        "metric": "log_loss" if lower else "auc", "is_lower_better": lower, "n": 4,
        "valid": int(best is not None), "best": best, "best_mode": "solve", "families": {}}}))


@pytest.mark.parametrize("lower", [False, True])
def test_ablation_table_mean_std_and_direction_aware_delta(tmp_path, lower):
    (tmp_path / "ablations.json").write_text(json.dumps({"task": "t"}))
    fam = [{"linear": 1.0}]
    _fake_run(tmp_path / "full" / "seed0", "t", 0.8, fam, lower)
    _fake_run(tmp_path / "full" / "seed1", "t", 0.9, fam, lower)
    _fake_run(tmp_path / "no_duration_weights" / "seed0", "t", 0.5, fam, lower)
    _fake_run(tmp_path / "no_duration_weights" / "seed1", "t", None, fam, lower)
    md = report.ablation_table(tmp_path)
    full, nodw = _row(md, "full"), _row(md, "no_duration_weights")
    assert full[1] == "0.8500 ± 0.0707" and full[3] == "2/2"
    assert nodw[1] == "0.5000" and nodw[3] == "1/2" and nodw[5] == "-3.85%"
    assert nodw[4] == ("+41.2%" if lower else "-41.2%")   # (0.5 - 0.85) / 0.85, + = better
    assert nodw[8] == "linear 75%"
    assert full[2] == "—"                                  # no best@k in these evaluations
    assert full[9] == "0/2 (—)"                            # no valid_frac in these metrics


def test_ablation_table_counts_a_seed_without_a_valid_program_as_the_sample_submission(tmp_path):
    """Never more lenient than the benchmark: a seed whose policy wrote nothing valid is not
    left out of the mean; it scores what the sample submission scores."""
    (tmp_path / "ablations.json").write_text(json.dumps({"task": "t"}))
    fam = [{"linear": 1.0}]
    _fake_run(tmp_path / "full" / "seed0", "t", 0.8, fam)
    _fake_run(tmp_path / "full" / "seed1", "t", None, fam)
    _fake_run(tmp_path / "no_instrumentation" / "seed0", "t", 0.8, fam)
    _fake_run(tmp_path / "no_instrumentation" / "seed1", "t", 0.6, fam)
    for seed in ("seed0", "seed1"):
        f = tmp_path / "full" / seed / "eval.json"
        ev = json.loads(f.read_text())
        ev["t"]["sample_submission_score"] = 0.5
        f.write_text(json.dumps(ev))
    md = report.ablation_table(tmp_path)
    full, noi = _row(md, "full"), _row(md, "no_instrumentation")
    assert full[1] == "0.6500 ± 0.2121" and full[3] == "1/2"      # (0.8 + 0.5) / 2
    assert noi[1] == "0.7000 ± 0.1414" and noi[4] == "+7.7%"        # (0.7 - 0.65) / 0.65


def _fake_eval(path: pathlib.Path, task, best, lower=False, n=32, valid=32, base=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({task: {
        "metric": "log_loss" if lower else "auc", "is_lower_better": lower, "n": n,
        "valid": valid if best is not None else 0, "best": best, "families": {},
        "sample_submission_score": base}}))


def test_family_phases_and_cpu_demo_report(tmp_path):
    runs = tmp_path / "runs"
    steps = [{"linear": 0.5, "random_forest": 0.5}] * 3 + [{"linear": 1.0}] * 3
    for k, (before, after) in enumerate(((0.80, 0.85), (0.82, 0.81), (None, 0.9))):
        d = runs / "t-auc" / f"seed{k}"
        _fake_run(d, "t-auc", None, steps)
        (d / "run").rename(d / "rl")
        _fake_eval(d / "before.json", "t-auc", before, base=0.5)
        _fake_eval(d / "after.json", "t-auc", after, base=0.5)
    for k, (before, after) in enumerate(((0.5, 0.6), (0.5, 0.55))):   # lower is better
        d = runs / "t-loss" / f"seed{k}"
        _fake_eval(d / "before.json", "t-loss", before, lower=True)
        _fake_eval(d / "after.json", "t-loss", after, lower=True)
    for k, cross in enumerate((0.86, 0.84)):
        _fake_eval(runs / "cross" / f"seed{k}" / "after_t-auc.json", "t-auc", cross)
    (runs / "t-auc" / "seed0" / "rl" / "reward_curve.png").write_bytes(b"\x89PNG")
    labels, share = report.family_phases(runs / "t-auc" / "seed0" / "rl")
    assert labels == ["steps 1-2", "steps 3-4", "steps 5-6"]
    assert share["linear"] == [0.5, 0.75, 1.0] and share["random_forest"] == [0.5, 0.25, 0.0]
    (runs / "cpu_demo.json").write_text(json.dumps(
        {"tasks": ["t-auc", "t-loss"], "seeds": [0, 1, 2], "n": 32, "steps": 30,
         "machine": "test"}))
    rep = tmp_path / "results" / "cpu_demo.md"
    assert report.main(["cpu_demo", f"--out_dir={runs}", f"--out={rep}"]) == 0
    md = rep.read_text()
    row = _row(md, "t-auc")
    assert row[2] == "0.5000" and row[3] == "0.8100 ± 0.0141" and row[4] == "0.8533 ± 0.0451"
    assert row[5] == "2/3"                       # seed 2: no valid SFT submission, RL valid
    assert row[6] == "64/96" and row[7] == "96/96" and row[8] == "6, 6, 6"
    loss = _row(md, "t-loss")
    assert loss[5] == "0/2" and loss[8] == "—"
    assert "better than the SFT policy's on 1 of 2 tasks" in md
    cross = [l for l in md.splitlines() if l.startswith("| t-auc |")][1].split(" | ")
    assert cross[2] == "0.8100 ± 0.0141" and cross[3] == "0.8500 ± 0.0141" and cross[4] == "2/2"
    assert "| linear | 50% | 75% | 100% |" in md
    kept = tmp_path / "results" / "cpu_demo_files"
    for rel in ("t-auc/seed0/before.json", "t-auc/seed1/after.json",
                "t-auc/seed0/rl/metrics.jsonl", "t-auc/seed0/rl/reward_curve.png",
                "cross/seed1/after_t-auc.json"):
        assert (kept / rel).is_file(), rel
    assert "](cpu_demo_files/t-auc/seed0/rl/reward_curve.png)" in md
    # The kept copy is enough to rebuild the tables (the runs themselves are large).
    assert (kept / "cpu_demo.json").is_file()
    again = tmp_path / "again" / "cpu_demo.md"
    assert report.main(["cpu_demo", f"--out_dir={kept}", f"--out={again}"]) == 0
    assert _row(again.read_text(), "t-auc") == row


# ----------------------------------------------------------------------------- accelerator_check


def test_accelerator_check_without_an_accelerator_says_so_and_exits_0(tmp_path):
    out = tmp_path / "acc"
    p = _script("accelerator_check.sh", {"OUT": out}, tmp_path / "cache", timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    lines = p.stdout.strip().splitlines()
    assert "cpu device(s)" in lines[0]
    assert lines[-1].startswith("[accelerator_check] no GPU or TPU here")
    assert not out.exists()                                    # nothing was run or written


def test_accelerator_check_dry_run_lists_every_step(tmp_path):
    out = tmp_path / "acc"
    p = _script("accelerator_check.sh", {"OUT": out, "FORCE_CPU": 1}, tmp_path / "cache",
                args=("--dry-run",), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    for step, what in (("parity", "tests/test_hf_parity.py"),
                       ("sampling", "bench_sampling.py --device=accelerator"),
                       ("training", "bench_train.py --device=accelerator"),
                       ("plan", "plan.py --backend=native"), ("run", "experiments/run.py")):
        assert any(l.startswith(f"[accelerator_check] {step}: ") and what in l
                   for l in p.stdout.splitlines()), (step, p.stdout)
    assert "--model_preset=qwen2p5_3b" in p.stdout and "--dtype=bfloat16 --mesh_shape=" in p.stdout
    assert not out.exists()
    bad = _script("accelerator_check.sh", {"OUT": out, "FORCE_CPU": 1, "STEPS": "nope"},
                  tmp_path / "cache", timeout=300)
    assert bad.returncode == 2 and "unknown step 'nope'" in bad.stderr


@pytest.mark.slow
def test_accelerator_check_plan_and_run_steps_write_the_table_on_cpu(standin, tmp_path):
    """The script's own plumbing, forced onto CPU with the micro stand-in: plan.py against
    the (CPU) devices and a 2-update run.py on a mesh, then the table."""
    out = tmp_path / "acc"
    p = _script("accelerator_check.sh", {"OUT": out, "FORCE_CPU": 1, "STEPS": "plan,run",
                                         "POLICY_DIR": standin["ckpt"], "MESH": "1,1",
                                         "PLAN_MODEL": "micro", "TOTAL_S": 3000,
                                         "STEP_TIMEOUT": 3000},
                standin["cache"], timeout=3000)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    md = (out / "accelerator_check.md").read_text()
    plan_row, run_row = (_row(md, s) for s in ("plan", "run"))
    assert plan_row[1] == "ok" and "GiB per device" in plan_row[2], md
    assert run_row[1] == "ok" and run_row[2].startswith("done: 2 updates"), md
