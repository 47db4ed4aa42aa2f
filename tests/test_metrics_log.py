"""Metrics logging: JSONL records, TensorBoard events read back, resume truncation, progress
line, reward-curve PNG and summary."""

import glob
import io
import json
import math
import struct

import numpy as np
import pytest

from mle_rl.io import metrics_log as ml


def read_tb_scalars(logdir) -> dict:
    """{tag: [(step, value), ...]} from tensorboardX event files (TFRecord framing)."""
    from tensorboardX.proto import event_pb2

    out = {}
    for path in sorted(glob.glob(f"{logdir}/events.out.tfevents.*")):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            (n,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
            pos += 12 + n + 4
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((event.step, v.simple_value))
        assert pos == len(data), f"{path} has a torn record"
    return out


def fake_metrics(step):
    return {"reward_mean": (step - 30) / 10, "valid_frac": min(1.0, 0.1 * step),
            "duration_mean_s": 40.0 + step, "best_score": 0.5 + 0.01 * min(step, 6),
            "clip_frac": np.float32(0.05), "approx_kl": 0.002, "staleness_mean": 0.5,
            "learner_busy_frac": 0.75, "per_task": {"iris": 0.9, "pizza": float("nan")},
            "n_actions": np.int64(16), "status": "ok"}


def test_log_writes_jsonl_and_tensorboard(tmp_path):
    with ml.MetricsLogger(tmp_path) as log:
        for step in range(1, 6):
            log.log(step, fake_metrics(step))
        log.log(6, {"reward_mean": float("inf"), "valid_frac": np.nan})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines]
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6]
    r = recs[2]
    for key in ("step", "time", "elapsed_s", "reward_mean", "valid_frac", "duration_mean_s",
                "best_score", "clip_frac", "approx_kl", "staleness_mean", "learner_busy_frac"):
        assert key in r
    assert r["reward_mean"] == pytest.approx(-2.7) and r["n_actions"] == 16
    assert r["clip_frac"] == pytest.approx(0.05) and isinstance(r["clip_frac"], float)
    assert r["per_task/iris"] == 0.9 and r["per_task/pizza"] is None and r["status"] == "ok"
    assert recs[-1]["reward_mean"] is None and recs[-1]["valid_frac"] is None
    assert all(a["elapsed_s"] <= b["elapsed_s"] for a, b in zip(recs, recs[1:]))
    assert "NaN" not in lines[2] and "Infinity" not in lines[-1]

    tb = read_tb_scalars(tmp_path / "tb")
    assert [s for s, _ in tb["reward_mean"]] == [1, 2, 3, 4, 5]     # inf is not a scalar
    assert tb["reward_mean"][2][1] == pytest.approx(-2.7)
    assert tb["per_task/iris"][0] == (1, pytest.approx(0.9))
    assert "status" not in tb and "time" not in tb


def test_bad_metric_is_a_clear_error(tmp_path):
    with ml.MetricsLogger(tmp_path, tensorboard=False) as log:
        with pytest.raises(ValueError, match=r"metric 'x' is ndarray \(3,\); log scalars"):
            log.log(1, {"x": np.zeros(3)})


def test_resume_truncates_later_steps(tmp_path):
    with ml.MetricsLogger(tmp_path, tensorboard=False) as log:
        for step in range(1, 8):
            log.log(step, {"reward_mean": float(step)})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 8, "reward_me')                       # torn by kill -9
    last_kept = ml.read_metrics(tmp_path / "metrics.jsonl")[4]
    # The run resumes from the checkpoint at step 5: steps 6.. are redone.
    with ml.MetricsLogger(tmp_path, tensorboard=False, resume_step=5) as log:
        for step in range(6, 9):
            rec = log.log(step, {"reward_mean": 10.0 * step})
            assert rec["elapsed_s"] >= last_kept["elapsed_s"]   # training time carries on
    recs = ml.read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [r["reward_mean"] for r in recs] == [1, 2, 3, 4, 5, 60, 70, 80]
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        json.loads(line)
    # A fresh start keeps the old file aside rather than appending to it.
    ml.MetricsLogger(tmp_path, tensorboard=False).close()
    assert (tmp_path / "metrics.jsonl").read_text() == ""
    assert len(ml.read_metrics(tmp_path / "metrics.jsonl.prev")) == 8


def test_resume_purges_tensorboard_after_the_step(tmp_path):
    with ml.MetricsLogger(tmp_path) as log:
        for step in range(1, 5):
            log.log(step, {"reward_mean": float(step)})
    with ml.MetricsLogger(tmp_path, resume_step=2) as log:
        log.log(3, {"reward_mean": 30.0})
    from tensorboardX.proto import event_pb2
    # The resumed writer starts with a SessionLog.START at step 3: TensorBoard drops
    # earlier events with step >= 3 when it reads this.
    (second,) = sorted(glob.glob(f"{tmp_path}/tb/events.*"))[1:]
    data = open(second, "rb").read()
    events = []
    pos = 0
    while pos < len(data):
        (n,) = struct.unpack("<Q", data[pos:pos + 8])
        events.append(event_pb2.Event.FromString(data[pos + 12:pos + 12 + n]))
        pos += 16 + n
    assert any(e.session_log.status == event_pb2.SessionLog.START and e.step == 3
               for e in events)


def test_progress_line_and_throttle():
    m = {"reward_mean": -3.2134, "valid_frac": 0.4375, "best_score": 0.87,
         "approx_kl": 0.0021, "learner_busy_frac": 0.731, "update_time_s": 41.23,
         "unused": 5}
    assert (ml.progress_line(12, 300, m) ==
            "step 12/300 | reward -3.21 | valid 0.438 | best 0.87 | kl 0.0021 | busy 0.731 | "
            "41.2 s/upd")
    assert ml.progress_line(3, None, {"valid_frac": None}) == "step 3 | valid -"
    out = io.StringIO()
    p = ml.Progress(10, every_s=3600.0, stream=out)
    assert p.update(1, m) is not None            # the first line prints at once
    assert p.update(2, m) is None                # then at most once an hour ...
    assert p.update(3, m, force=True).startswith("step 3/10 | reward -3.21")
    last = p.update(10, m)                       # ... except at the end
    assert last is not None and "eta" not in last
    assert out.getvalue().count("\n") == 3 and "| eta " in out.getvalue().splitlines()[0]
    # A wall-clock budget caps the ETA: 100000 steps at any pace, but 1 h of budget.
    p = ml.Progress(100000, every_s=0.0, stream=io.StringIO(), max_wall_s=3600.0)
    p._t0 -= 60.0                                # one step took a minute
    line = p.update(1, m)
    assert " | 1m00s | eta 59m00s" in line, line


def test_plot_and_summary(tmp_path):
    with ml.MetricsLogger(tmp_path, tensorboard=False) as log:
        for step in range(1, 31):
            log.log(step, fake_metrics(step))
    path = tmp_path / "metrics.jsonl"
    png = ml.plot_reward_curve(path, tmp_path / "reward.png")
    with open(png, "rb") as f:
        head = f.read(8)
    assert head == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "reward.png").stat().st_size > 10_000
    text = ml.summarize(path)
    lines = text.splitlines()
    assert lines[0].startswith("30 updates (steps 1-30), wall time ")
    assert "reward: first -2.9, last 0, best 0 (step 30)" in text     # (30 - 30) / 10
    assert "valid fraction: first 0.1, last 1, best 1 (step 10)" in text
    assert "best score: 0.56 (first reached at step 6; last 0.56)" in text
    assert f"action duration: mean {np.mean(np.arange(41, 71)):.3g} s" in text
    assert ml.summarize(tmp_path / "missing.jsonl").startswith("no updates logged")
    assert not math.isnan(float(lines[1].split("first ")[1].split(",")[0]))
