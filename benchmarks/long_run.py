"""A long run, watched for leaks: `experiments/run.py` on the default flagfile for an hour,
with the peak RSS, open file descriptors, threads and processes of the trainer and all its
descendants, and the temp directories of the run (TMPDIR/mle_rl_*), sampled every minute.

    python benchmarks/long_run.py                       # an hour, the README's main job
    python benchmarks/long_run.py --minutes=10 --every_s=30 --out=runs/long_run_short

Prints one line per sample and, at the end, each quantity's slope after warm-up (a least
squares line over the samples after --warmup_minutes, per hour): flat means no leak. Writes
OUT/samples.jsonl and OUT/report.md. Run it alone on the machine (quote `uptime`).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
QUANTITIES = ("rss_mb", "trainer_rss_mb", "fds", "threads", "processes", "temp_dirs")


def descendants(pid: int) -> list[int]:
    children: dict = {}
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        out.append(p)
        frontier += children.get(p, [])
    return out


def _status(pid: int) -> dict:
    out = {}
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            out[key] = value.strip()
    except OSError:
        pass
    return out


def sample(pid: int) -> dict:
    """The trainer's and its descendants' footprint now."""
    pids = descendants(pid)
    rss = fds = threads = 0
    trainer_rss = 0
    for p in pids:
        st = _status(p)
        kb = int(st.get("VmRSS", "0 kB").split()[0]) if st else 0
        rss += kb
        if p == pid:
            trainer_rss = kb
        threads += int(st.get("Threads", "0") or 0)
        try:
            fds += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            pass
    temp = len(list(pathlib.Path(tempfile.gettempdir()).glob("mle_rl_*")))
    return {"rss_mb": rss / 1024, "trainer_rss_mb": trainer_rss / 1024, "fds": fds,
            "threads": threads, "processes": len(pids), "temp_dirs": temp}


def slope_per_hour(ts: list, ys: list) -> float:
    n = len(ts)
    if n < 2:
        return 0.0
    mt, my = sum(ts) / n, sum(ys) / n
    var = sum((t - mt) ** 2 for t in ts)
    return 0.0 if var == 0 else sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var * 3600


def trainer_memory(metrics_path: pathlib.Path, warmup_s: float) -> list:
    """The trainer's own view of its memory (`mem/*` of metrics.jsonl, one row per update;
    see mle_rl/runtime/footprint.py): what grows, the heap in use or only tcmalloc's cache."""
    try:
        rows = [json.loads(x) for x in metrics_path.read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return []
    keys = sorted({k for r in rows for k in r if k.startswith("mem/")})
    if not rows or not keys:
        return []
    warm = [r for r in rows if r.get("elapsed_s", r.get("wall_s", 0)) >= warmup_s] or rows
    lines = ["", f"The trainer's memory at each of its {len(rows)} updates (metrics.jsonl "
             "`mem/*`: heap_in_use = allocated and not freed, heap_cached = freed and kept by "
             "tcmalloc, jax_live = arrays still referenced):", "",
             "| quantity | first update | first after warm-up | last | max "
             "| slope after warm-up, per hour |", "|---|---|---|---|---|---|"]
    for r in rows:        # everything tcmalloc holds: in use + cached (flat = no leak)
        if r.get("mem/heap_in_use_mb") is not None and r.get("mem/heap_cached_mb") is not None:
            r["mem/heap_total_mb"] = r["mem/heap_in_use_mb"] + r["mem/heap_cached_mb"]
    if any("mem/heap_total_mb" in r for r in rows):
        keys.append("mem/heap_total_mb")
    for k in keys:
        pts = [(r.get("elapsed_s", r.get("wall_s")), r[k]) for r in warm
               if r.get(k) is not None]
        ys = [r[k] for r in rows if r.get(k) is not None]
        if not pts or not ys:
            continue
        s = slope_per_hour([t for t, _ in pts], [y for _, y in pts])
        lines.append(f"| {k} | {ys[0]:.1f} | {pts[0][1]:.1f} | {ys[-1]:.1f} | {max(ys):.1f} "
                     f"| {s:+.2f} |")
    return lines


def write_report(out: pathlib.Path, rows: list, a, cmd: list, status) -> str:
    """OUT/report.md from the samples (and the trainer's metrics.jsonl); returns it."""
    warm = [r for r in rows if r["t_s"] >= a.warmup_minutes * 60]
    lines = [f"# Long run: {a.minutes:.0f} min of `{' '.join(cmd[1:])}`", "",
             f"exit status {status}; {len(rows)} samples every {a.every_s:.0f} s; "
             f"load when reported {os.getloadavg()}", "",
             f"| quantity | first | after warm-up ({a.warmup_minutes:.0f} min) | last | max "
             f"| slope after warm-up, per hour |", "|---|---|---|---|---|---|"]
    for q in QUANTITIES:
        ys = [r[q] for r in rows]
        wy = [r[q] for r in warm] or ys
        s = slope_per_hour([r["t_s"] for r in warm], [r[q] for r in warm])
        lines.append(f"| {q} | {ys[0]:.0f} | {wy[0]:.0f} | {ys[-1]:.0f} | {max(ys):.0f} "
                     f"| {s:+.2f} |")
    lines += trainer_memory(out / "run" / "metrics.jsonl", a.warmup_minutes * 60)
    report = "\n".join(lines) + "\n"
    (out / "report.md").write_text(report)
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--every_s", type=float, default=60)
    p.add_argument("--warmup_minutes", type=float, default=10)
    p.add_argument("--out", default="runs/long_run")
    p.add_argument("--flagfile", default="experiments/tabular.flags")
    p.add_argument("--report_only", action="store_true",
                   help="no run: the report again from OUT's samples (another --warmup_minutes)")
    a, extra = p.parse_known_args(argv)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "experiments" / "run.py"), f"--flagfile={a.flagfile}",
           f"--workdir={out / 'run'}", f"--max_wall_s={a.minutes * 60:.0f}", "--max_steps=100000",
           *extra]
    if a.report_only:
        rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines() if x]
        print(write_report(out, rows, a, cmd, "(not rerun)"))
        return 0
    print("load:", os.getloadavg(), "\n+", " ".join(cmd), flush=True)
    log = open(out / "run.log", "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    t0, rows = time.time(), []
    with open(out / "samples.jsonl", "w") as f:
        while proc.poll() is None:
            row = {"t_s": round(time.time() - t0, 1), **sample(proc.pid)}
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(" ".join(f"{k}={v:.0f}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in row.items()), flush=True)
            deadline = time.time() + a.every_s
            while proc.poll() is None and time.time() < deadline:
                time.sleep(1)
    print(write_report(out, rows, a, cmd, proc.returncode))
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
