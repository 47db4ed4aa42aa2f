"""`experiments/duration_figure.py` (the paper's Figure 2 from ablation runs),
`experiments/instrument_figure.py` and `experiments/self_improve_share.py` on files written
here by hand."""

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import duration_figure  # noqa: E402
import instrument_figure  # noqa: E402
import self_improve_share  # noqa: E402


def _metrics(d: pathlib.Path, fast: list, times: list):
    d.mkdir(parents=True)
    rows = [{"step": i + 1, "family/linear": f, "family/mlp": 1 - f, "duration_mean_s": t,
             "score_mean_valid": 0.8} for i, (f, t) in enumerate(zip(fast, times))]
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_duration_figure_thirds_and_png(tmp_path, capsys):
    out = tmp_path / "abl"
    for s in (0, 1):
        _metrics(out / "full" / f"seed{s}" / "run", [0.5, 0.4, 0.3, 0.2, 0.1, 0.0],
                 [1, 2, 3, 4, 5, 6])
        _metrics(out / "no_duration_weights" / f"seed{s}" / "run",
                 [0.5, 0.6, 0.7, 0.8, 0.9, 1.0], [6, 5, 4, 3, 2, 1])
    png = tmp_path / "fig.png"
    assert duration_figure.main([f"--out_dir={out}", f"--out={png}", "--best=mlp"]) == 0
    text = capsys.readouterr().out
    assert "| full | 2 | 0.45 → 0.25 → 0.05 | 1.50 → 3.50 → 5.50 |" in text
    assert "| no_duration_weights | 2 | 0.55 → 0.75 → 0.95 |" in text
    assert "| full | 2 | 0.45 → 0.25 → 0.05 | 1.50 → 3.50 → 5.50 | 0.80 → 0.80 → 0.80 | " \
           "0.55 → 0.75 → 0.95 |" in text                       # --best=mlp: 1 - linear
    assert "mlp share (thirds)" in text
    assert png.is_file() and png.stat().st_size > 1000
    assert duration_figure.main([f"--out_dir={tmp_path / 'none'}", f"--out={png}"]) == 2


def test_duration_figure_credit_per_family(tmp_path, capsys):
    """advantage/, weight/, credit/<family> rows -> program-weighted means per family."""
    d = tmp_path / "abl" / "full" / "seed0" / "run"
    d.mkdir(parents=True)
    rows = [{"step": 1, "family/mlp": 0.5, "family/linear": 0.5, "advantage/mlp": -1.0,
             "weight/mlp": 2.0, "credit/mlp": -2.0, "advantage/linear": 1.0,
             "weight/linear": 0.5, "credit/linear": 0.5},
            {"step": 2, "family/mlp": 0.25, "family/linear": 0.75, "advantage/mlp": 2.0,
             "weight/mlp": 1.0, "credit/mlp": 2.0, "advantage/linear": 0.0,
             "weight/linear": 1.0, "credit/linear": 0.0}]
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert duration_figure.main([f"--out_dir={tmp_path / 'abl'}", f"--out={tmp_path / 'f.png'}",
                                 "--variants=full"]) == 0
    text = capsys.readouterr().out
    # mlp: 0.75 programs; advantage (0.5 * -1 + 0.25 * 2) / 0.75 = 0, weight 5/3,
    # credit (0.5 * -2 + 0.25 * 2) / 0.75 = -2/3; linear: 1.25 programs
    assert "| mlp | 0.38 | +0.000 | 1.67 | -0.667 |" in text
    assert "| linear | 0.62 | +0.400 | 0.80 | +0.200 |" in text
    assert duration_figure.credit(tmp_path / "abl", "none") == {}


def _valid_run(d: pathlib.Path, valid: list, hits: list):
    d.mkdir(parents=True)
    rows = [{"step": i + 1, "valid_frac": v, "hits_mean": h, "reward_mean": -10 * (1 - v),
             "score_mean_valid": 0.7 if v else None, "actions_done": 8 * (i + 1)}
            for i, (v, h) in enumerate(zip(valid, hits))]
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_instrument_figure_counts_runs_that_never_get_a_valid_program(tmp_path, capsys):
    out = tmp_path / "abl"
    _valid_run(out / "full" / "seed0" / "run", [0, 0, 0.25, 0.5, 0.5, 0.75], [1, 2, 3, 4, 5, 6])
    _valid_run(out / "full" / "seed1" / "run", [0, 0.25, 0.25, 0.5, 0.75, 0.75], [2] * 6)
    _valid_run(out / "no_instrumentation" / "seed0" / "run", [0] * 6, [0] * 6)
    _valid_run(out / "no_instrumentation" / "seed1" / "run", [0, 0, 0, 0, 0.25, 0], [0] * 6)
    png = tmp_path / "fig.png"
    assert instrument_figure.main([f"--out_dir={out}", f"--out={png}"]) == 0
    text = capsys.readouterr().out
    # thirds of 6 updates: valid 0, 0.125 | 0.25, 0.5 | 0.5, 0.75 (seed 0) and 0, 0.25 | ...
    assert "| full | 2 | 0.06 → 0.38 → 0.69 | 0.70 → 0.70 → 0.70 |" in text
    assert text.count("| 0/2 | 3, 2 |") == 1                          # full: both found one
    assert "| no_instrumentation | 2 | 0.00 → 0.00 → 0.06 | — → — → 0.70 |" in text
    assert "| 0.00 → 0.00 → 0.00 | 1/2 | never, 5 |" in text          # no prints, one never
    assert png.is_file() and png.stat().st_size > 1000
    assert instrument_figure.main([f"--out_dir={tmp_path / 'none'}", f"--out={png}"]) == 2


def test_instrument_figure_counts_valid_evaluation_samples_by_mode(tmp_path, capsys):
    out = tmp_path / "abl"
    _valid_run(out / "full" / "seed0" / "run", [0, 0.5], [1, 2])
    ev = lambda scores, modes: json.dumps({"t": {"scores": scores, "modes": modes}})  # noqa
    (out / "full" / "seed0" / "eval.json").write_text(
        ev([0.7, None, 0.8, 0.75], ["solve", "solve", "improve", "improve"]))
    start = tmp_path / "start.json"
    start.write_text(ev([None, None, 0.6], ["solve"] * 3))
    assert instrument_figure.main([f"--out_dir={out}", f"--out={tmp_path / 'f.png'}",
                                   "--start_evals", str(start)]) == 0
    text = capsys.readouterr().out
    assert "| start | 1/3 | — |" in text and "| full | 1/2 | 2/2 |" in text


def test_self_improve_share_counts_strict_wins(tmp_path, capsys):
    ev = {"t1": {"metric": "auc", "is_lower_better": False, "scores": [0.8, 0.7, 0.85, None],
                 "modes": ["solve", "solve", "improve", "improve"]},
          "t2": {"metric": "rmse", "is_lower_better": True, "scores": [3.0, 2.0, 2.0, 2.5],
                 "modes": ["solve", "solve", "improve", "improve"]}}
    f = tmp_path / "sft.json"
    f.write_text(json.dumps(ev))
    assert self_improve_share.main([str(f)]) == 0
    out = capsys.readouterr().out
    assert "| sft | t1 | auc ↑ | 0.8000 (2) | 0.8500 (2) | improve |" in out
    assert "| sft | t2 | rmse ↓ | 2.0000 (2) | 2.0000 (2) | solve |" in out    # a tie: no win
    assert "on 1 of 2 (task, policy) pairs" in out


def test_self_improve_share_names_repeated_stems_by_their_folders(tmp_path, capsys):
    ev = {"t": {"metric": "auc", "is_lower_better": False, "scores": [0.8, 0.9],
                "modes": ["solve", "improve"]}}
    paths = []
    for v in ("full", "no_duration_weights"):
        f = tmp_path / v / "seed0" / "eval.json"
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps(ev))
        paths.append(str(f))
    assert self_improve_share.main(paths) == 0
    out = capsys.readouterr().out
    assert "| full/seed0 | t | auc ↑ | 0.8000 (1) | 0.9000 (1) | improve |" in out
    assert "| no_duration_weights/seed0 | t |" in out


def test_first_valid_update_skips_rows_without_a_valid_fraction():
    import report
    rows = [{"step": 1}, {"step": 2, "valid_frac": None}, {"step": 3, "valid_frac": 0.0},
            {"step": 4, "valid_frac": 0.25}]
    assert report.first_valid_update(rows) == 4
    assert report.first_valid_update(rows[:3]) is None
