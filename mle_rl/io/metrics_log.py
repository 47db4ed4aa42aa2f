"""Metrics of a training run: `metrics.jsonl`, TensorBoard events, a progress line, and at the
end a summary and a reward-curve PNG.

`metrics.jsonl` holds one JSON object per update, e.g.
  {"step": 12, "time": 1764410000.1, "elapsed_s": 495.2, "reward_mean": -3.21,
   "valid_frac": 0.44, "duration_mean_s": 41.2, "best_score": 0.87, "clip_frac": 0.03,
   "approx_kl": 0.002, "staleness_mean": 0.6, "learner_busy_frac": 0.73, ...}
`time` is the wall clock (Unix seconds); `elapsed_s` counts training time across resumes.
NaN and ±inf are written as null (JSON has neither). TensorBoard scalars go to `workdir/tb`.

Resuming from checkpoint step S: `MetricsLogger(workdir, resume_step=S)` drops the lines with
step > S (logged after that checkpoint, so about to be redone) and a torn last line, so
the resumed run continues the file without duplicates; TensorBoard is told to purge its
events after S likewise.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Iterable, Optional, Sequence

import numpy as np

from mle_rl.io import disk

METRICS_FILE = "metrics.jsonl"

# (metric key, label) pairs shown by `progress_line`; a label with "{}" places the value.
PROGRESS_KEYS = (("reward_mean", "reward"), ("valid_frac", "valid"), ("best_score", "best"),
                 ("approx_kl", "kl"), ("staleness_mean", "stale"),
                 ("learner_busy_frac", "busy"), ("update_time_s", "{} s/upd"))


def _scalar(key: str, v):
    """A JSON value for one metric: int/bool/str kept, numbers as float, non-finite -> None."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, np.integer)) and not isinstance(v, np.bool_):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    try:
        a = np.asarray(v)
    except Exception:  # noqa: BLE001
        a = None
    if a is None or a.size != 1 or a.dtype.kind not in "biuf":
        raise ValueError(f"metric {key!r} is {type(v).__name__} {getattr(a, 'shape', '')}; log "
                         "scalars (numbers, bools or strings) or dicts of them.")
    x = float(a.reshape(()))
    return x if math.isfinite(x) else None


def clean_metrics(metrics: dict, prefix: str = "") -> dict:
    """Flattens nested dicts to "a/b" keys and turns values into JSON scalars."""
    out = {}
    for k, v in metrics.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(clean_metrics(v, key + "/"))
        else:
            out[key] = _scalar(key, v)
    return out


def read_metrics(path) -> list[dict]:
    """The records of a metrics.jsonl (a torn or garbled line, e.g. after kill -9, skipped)."""
    records = []
    if not os.path.exists(path):
        return records
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("step"), int):
                records.append(rec)
    return records


def _summary_writer_class():
    """tensorboardX's SummaryWriter (imported here: optional at run time), without torch.

    tensorboardX imports torch at import time when it is installed, only to accept torch
    tensors (we log floats); that import cost 3-4 s per trainer start. Unless torch or
    tensorboardX is already loaded, `import torch` fails during the import (a None entry in
    sys.modules), and later imports of torch are unaffected."""
    if "torch" in sys.modules or "tensorboardX" in sys.modules:
        from tensorboardX import SummaryWriter
        return SummaryWriter
    sys.modules["torch"] = None
    try:
        from tensorboardX import SummaryWriter
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
    return SummaryWriter


class MetricsLogger:
    """Appends one record per update to `workdir/metrics.jsonl` and to TensorBoard.

    resume_step: None starts a new file (an existing one is kept as metrics.jsonl.prev);
      an int keeps the records with step <= resume_step and appends after them.
    """

    def __init__(self, workdir, *, tensorboard: bool = True, resume_step: Optional[int] = None):
        self.workdir = os.fspath(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.path = os.path.join(self.workdir, METRICS_FILE)
        self._elapsed0 = 0.0
        if resume_step is None:
            if os.path.exists(self.path) and os.path.getsize(self.path):
                os.replace(self.path, self.path + ".prev")
            open(self.path, "w").close()
        else:
            kept = [r for r in read_metrics(self.path) if r["step"] <= resume_step]
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                for r in kept:
                    f.write(json.dumps(r) + "\n")
            os.replace(tmp, self.path)
            if kept and isinstance(kept[-1].get("elapsed_s"), (int, float)):
                self._elapsed0 = float(kept[-1]["elapsed_s"])
        self._t0 = time.time()
        # A raw descriptor, no buffer: each record is one write, cut back when it fails.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._tb = None
        if tensorboard:
            SummaryWriter = _summary_writer_class()
            purge = None if resume_step is None else int(resume_step) + 1
            # The suffix keeps two writers started in the same second from sharing a file.
            self._tb = SummaryWriter(os.path.join(self.workdir, "tb"), purge_step=purge,
                                     flush_secs=30, filename_suffix=f".{time.time_ns()}")

    def log(self, step: int, metrics: dict) -> dict:
        """Writes one record (and returns it). metrics: scalars or nested dicts of scalars."""
        now = time.time()
        rec = {"step": int(step), "time": round(now, 3),
               "elapsed_s": round(self._elapsed0 + now - self._t0, 3)}
        for k, v in clean_metrics(metrics).items():
            if k not in rec:
                rec[k] = v
        self._append(json.dumps(rec, allow_nan=False) + "\n")
        if self._tb is not None:
            for k, v in rec.items():
                if k not in ("step", "time") and isinstance(v, (int, float)) and v is not None:
                    self._tb.add_scalar(k, float(v), global_step=rec["step"], walltime=now)
        return rec

    def _append(self, line: str) -> None:
        """Writes one whole line or nothing: a write that fails (a full disk) is cut back
        to the file's previous end, so metrics.jsonl never holds a torn line."""
        data = line.encode("utf-8")
        end = os.fstat(self._fd).st_size
        try:
            done = 0
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except OSError as e:
            os.ftruncate(self._fd, end)
            if disk.is_disk_full(e):
                raise disk.disk_full(self.path, "a metrics record") from e
            raise

    def flush(self) -> None:
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------------------------------
# Progress.


def _num(v) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.3g}"
    return "-" if v is None else str(v)


def _duration(s: float) -> str:
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def progress_line(step: int, max_steps: Optional[int], metrics: dict,
                  keys: Sequence = PROGRESS_KEYS) -> str:
    """`step 12/300 | reward -3.21 | valid 0.44 | best 0.87 | kl 0.002 | busy 0.73 | 41.2 s/upd`.

    keys: (metric key, label) pairs; a label with "{}" places the value in it; keys missing
    from `metrics` are left out.
    """
    parts = [f"step {step}/{max_steps}" if max_steps else f"step {step}"]
    for key, label in keys:
        if key in metrics:
            v = _num(metrics[key])
            parts.append(label.format(v) if "{}" in label else f"{label} {v}")
    return " | ".join(parts)


class Progress:
    """Prints `progress_line` (plus elapsed time and ETA) at most every `every_s` seconds.

    The ETA is the sooner of the step budget at the current pace and, with `max_wall_s`,
    what is left of the wall-clock budget."""

    def __init__(self, max_steps: Optional[int], *, every_s: float = 10.0, start_step: int = 0,
                 keys: Sequence = PROGRESS_KEYS, stream=None, max_wall_s: Optional[float] = None):
        self.max_steps, self.every_s, self.keys = max_steps, every_s, keys
        self.max_wall_s = max_wall_s
        self.stream = stream if stream is not None else sys.stderr
        self._start_step = start_step
        self._t0 = time.monotonic()
        self._last = -math.inf

    def update(self, step: int, metrics: dict, *, force: bool = False) -> Optional[str]:
        """Prints and returns the line when due (or forced, or at the last step), else None."""
        now = time.monotonic()
        last = self.max_steps is not None and step >= self.max_steps
        if not (force or last or now - self._last >= self.every_s):
            return None
        self._last = now
        line = progress_line(step, self.max_steps, metrics, self.keys)
        elapsed = now - self._t0
        line += f" | {_duration(elapsed)}"
        done = step - self._start_step
        if self.max_steps and done > 0 and step < self.max_steps:
            eta = elapsed / done * (self.max_steps - step)
            if self.max_wall_s:
                eta = min(eta, max(self.max_wall_s - elapsed, 0.0))
            line += f" | eta {_duration(eta)}"
        print(line, file=self.stream, flush=True)
        return line


# ---------------------------------------------------------------------------------------
# End of run.


def _series(records: list, key: str) -> tuple[np.ndarray, np.ndarray]:
    pts = [(r["step"], r[key]) for r in records
           if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    if not pts:
        return np.zeros(0), np.zeros(0)
    s, v = zip(*pts)
    return np.asarray(s, np.float64), np.asarray(v, np.float64)


def plot_reward_curve(metrics_jsonl, out_png,
                      keys: Iterable[str] = ("reward_mean", "valid_frac", "best_score")) -> str:
    """One panel per key against step (raw, and a moving average when there are >10 points);
    writes `out_png` and returns its path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_jsonl)
    keys = list(keys)
    fig, axes = plt.subplots(len(keys), 1, figsize=(7, 2.2 * len(keys) + 0.6), sharex=True,
                             squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        x, y = _series(records, key)
        if x.size:
            ax.plot(x, y, lw=0.8, alpha=0.5 if x.size > 10 else 1.0, marker="." if x.size < 50
                    else None)
            if x.size > 10 and not key.startswith("best"):     # a running best is smooth
                w = max(2, x.size // 20)
                avg = np.convolve(y, np.ones(w) / w, mode="valid")
                ax.plot(x[w - 1:], avg, lw=1.8, label=f"mean of {w}")
                ax.legend(loc="best", fontsize=8)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("update")
    fig.suptitle(f"{os.path.basename(os.path.dirname(os.path.abspath(metrics_jsonl)))}: "
                 f"{len(records)} updates")
    fig.tight_layout()
    out_png = os.fspath(out_png)
    tmp = f"{out_png}.tmp-{os.getpid()}"          # never a torn PNG, even under kill -9
    fig.savefig(tmp, dpi=110, format=os.path.splitext(out_png)[1][1:] or "png")
    plt.close(fig)
    os.replace(tmp, out_png)
    return out_png


def summarize(metrics_jsonl) -> str:
    """A few lines: updates, wall time, reward and valid fraction (first/last/best), best
    score, mean action duration."""
    records = read_metrics(metrics_jsonl)
    if not records:
        return f"no updates logged in {metrics_jsonl}."
    steps = [r["step"] for r in records]
    elapsed = records[-1].get("elapsed_s")
    lines = [f"{len(records)} updates (steps {steps[0]}-{steps[-1]}), wall time "
             f"{_duration(elapsed) if isinstance(elapsed, (int, float)) else '?'}"]
    for key, label in (("reward_mean", "reward"), ("valid_frac", "valid fraction")):
        x, y = _series(records, key)
        if x.size:
            i = int(np.argmax(y))
            lines.append(f"{label}: first {y[0]:.4g}, last {y[-1]:.4g}, best {y[i]:.4g} "
                         f"(step {int(x[i])})")
    x, y = _series(records, "best_score")
    if x.size:
        i = int(np.argmax(y))             # the first step that reached the best
        lines.append(f"best score: {y[i]:.4g} (first reached at step {int(x[i])}; last "
                     f"{y[-1]:.4g})")
    x, y = _series(records, "duration_mean_s")
    if x.size:
        lines.append(f"action duration: mean {y.mean():.3g} s (first {y[0]:.3g} s, last "
                     f"{y[-1]:.3g} s)")
    return "\n".join(lines)
