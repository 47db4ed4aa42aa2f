"""Real shapes end to end on CPU: a Qwen2.5-0.5B-shaped policy through run.py and evaluate.py,
and experiments/plan.py's prediction against what the run really held.

For each --dtype: builds the stand-in checkpoint (`mle_rl/io/standin.py`: the real 0.5B
config, 24 layers, width 896, 151,936-entry tied embedding, random weights, with a trained
151,936-entry byte-level BPE and Qwen2.5's chat template) or takes --policy, then runs, each
in its own process, `experiments/run.py` for --updates PPO updates and
`experiments/evaluate.py` best-of---n, and prints the time of each phase, the peak RSS of
each process (the trainer's from the kernel; its children's, by role, sampled every 0.25 s)
and the size of what they wrote. Phases of run.py come from its metrics.jsonl and
summary.json: start-up (imports, loading the policy, building the learner), sampling, each
update (the first one compiles), and the finish (final checkpoint and the exported policy).

Then `plan.py` with the run's own flags, at the lengths its updates padded to, predicts the
update's and the sampler's peak per device; the run's measured peaks are the trainer's peak
RSS up to the end of its first sampling call and over its updates, minus its RSS once the
backend is up and before anything is loaded or compiled (summary.json: `memory_stages_mb`).

    python benchmarks/bench_real_shapes.py                       # bfloat16 and float32
    python benchmarks/bench_real_shapes.py --dtypes=bfloat16 --updates=2 --n=4 \
        --prompt-tokens=1536 --new-tokens=192                    # the largest that fits 24 GiB
    python benchmarks/bench_real_shapes.py --policy ~/.cache/mle_rl/policies/default \
        --dtypes=float32 --batch=16 \
        --run-flags=--flagfile=experiments/tabular.flags        # the tiny default's own run
    python benchmarks/bench_real_shapes.py --replan --out=DIR ...   # plan.py again, same runs

Defaults (batch 2, one sequence per optimizer step, 512 prompt + 64 new tokens, shared
critic) keep one process under ~12 GB.

A random policy writes no working program (every action is an error); this measures the
plumbing at real shapes, not learning. No reference to compare with exists here (no GPU,
no checkpoint), so times are absolute: read them with the load printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time

import common

ROOT = pathlib.Path(__file__).resolve().parents[1]
GIB = 1 << 30


def _role(cmdline: list) -> str:
    """What a process of a run is, from its command line (the peaks are kept per role)."""
    text = " ".join(cmdline)
    for role, marker in (("actor", "actor"), ("sandboxed program", "solution"),
                         ("sandboxed program", "bwrap"), ("warm pool", "warm_pool")):
        if marker in text:
            return role
    return pathlib.Path(cmdline[0]).name if cmdline else "?"


def _watch_tree(pid: int, peaks: dict, timeline: list, stop: threading.Event,
                every_s: float = 0.25) -> None:
    """Samples the RSS of `pid` and of every descendant until `stop`: peaks[role] = max GiB
    of one child of that role; timeline: (unix time, the process's GiB, its children's GiB
    together) about once a second, to place a peak within the run's phases."""
    try:
        import psutil
        root = psutil.Process(pid)
    except Exception:       # psutil missing (a test extra) or the process already gone
        return
    last = 0.0
    while not stop.wait(every_s):
        try:
            own, children = root.memory_info().rss / GIB, root.children(recursive=True)
        except psutil.Error:
            return
        total = 0.0
        for c in children:
            try:
                rss, role = c.memory_info().rss / GIB, _role(c.cmdline())
            except psutil.Error:
                continue
            total += rss
            peaks[role] = max(peaks.get(role, 0.0), rss)
        now = time.time()
        if now - last >= 1.0 or (timeline and own > timeline[-1][1] + 0.25):
            timeline.append((round(now, 2), round(own, 3), round(total, 3)))
            last = now


def run_timed(cmd, log_path: pathlib.Path, env=None) -> dict:
    """Runs `cmd`, its output to `log_path`; -> wall seconds, peak RSS (GiB) of the process
    and of its children by role (sampled every 0.25 s), exit status."""
    t0 = time.monotonic()
    peaks, timeline, stop = {}, [], threading.Event()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        watcher = threading.Thread(target=_watch_tree, args=(proc.pid, peaks, timeline, stop), daemon=True)
        watcher.start()
        _, status, usage = os.wait4(proc.pid, 0)
        stop.set()
        watcher.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss: KiB, of this process (run.py re-executes itself in place with tcmalloc).
    return {"wall_s": time.monotonic() - t0, "start": t0, "peak_rss_gib": usage.ru_maxrss / (1 << 20),
            "children_peak_gib": peaks, "timeline": timeline, "rc": proc.returncode}


def dir_gib(path: pathlib.Path) -> float:
    if not path.exists():
        return 0.0
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / GIB


def run_files(workdir: pathlib.Path) -> tuple:
    """run.py's metrics rows and summary."""
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines() if x]
    return rows, json.loads((workdir / "summary.json").read_text())


def run_phases(rows: list, summary: dict):
    learner = [r["learner_busy_frac"] * r["wall_s"] for r in rows]
    sampler = rows[-1]["sampler_busy_frac"] * rows[-1]["wall_s"]
    loop_start = rows[0]["time"] - rows[0]["wall_s"]
    phases = {"start-up (load policy, build learner)": None, "sampling (all calls)": sampler}
    for i, cum in enumerate(learner):
        phases[f"update {i + 1}" + (" (compiles)" if i == 0 else "")] = cum - (
            learner[i - 1] if i else 0.0)
    phases["loop total"] = summary["wall_s"]
    return phases, loop_start, summary


def _policy_flags(args, policy_dir, dtype) -> list:
    """The flags run.py, evaluate.py and plan.py share: the policy, the task, the lengths."""
    return [f"--policy_dir={policy_dir}", f"--dtype={dtype}", f"--tasks={args.task}",
            f"--max_prompt_tokens={args.prompt_tokens}", f"--max_new_tokens={args.new_tokens}",
            "--num_actors=1"]


def _train_flags(args, policy_dir, dtype) -> list:
    """The flags run.py and plan.py share (plan.py takes run.py's flags)."""
    return [*_policy_flags(args, policy_dir, dtype),
            f"--batch_size={args.batch}", f"--sample_batch={args.batch}",
            f"--max_in_flight={args.batch}", f"--critic={args.critic}",
            f"--minibatches={args.minibatches}", f"--remat={str(args.remat).lower()}",
            *args.run_flags]


def measured_memory(rows: list, summary: dict) -> dict:
    """From run.py's summary and metrics: the trainer's RSS before anything loads (imports
    done, no compile yet), the peak up to the end of its first sampling call (policy,
    learner state, sampler), the peak over the updates, and the shapes the updates padded to."""
    stages = summary["memory_stages_mb"]
    base = stages["start"]["rss_mb"]
    return {"baseline_gib": base / 1024,
            "stages_gib": {k: v["rss_mb"] / 1024 for k, v in stages.items()},
            "sampler_gib": (stages["first_sample"]["peak_rss_mb"] - base) / 1024,
            "update_gib": (max(r["mem/peak_rss_mb"] for r in rows) - base) / 1024,
            "padded": (max(r["padded_prompt_tokens"] for r in rows),
                       max(r["padded_response_tokens"] for r in rows))}


def plan_memory(args, policy_dir, dtype, padded, out: pathlib.Path) -> dict:
    """experiments/plan.py for the run's flags at the lengths its updates padded to."""
    flags = _train_flags(args, policy_dir, dtype) + [
        f"--max_prompt_tokens={padded[0]}", f"--max_new_tokens={padded[1]}", "--devices=1"]
    if args.plan_extrapolate:
        flags.append(f"--extrapolate_layers={args.plan_extrapolate}")
    log = out / f"plan_{dtype}.log"
    res = run_timed([sys.executable, "experiments/plan.py", *flags], log)
    if res["rc"] != 0:
        return {"error": log.read_text()[-2000:]}
    out_json = json.loads(log.read_text().strip().splitlines()[-1])
    plan, host = out_json["per_device_bytes"], out_json.get("host_bytes")
    result = {"update_gib": plan["update"]["peak"] / GIB,
              "sampler_gib": plan["sampler"]["peak"] / GIB if plan.get("sampler") else None,
              "state_gib": plan["state"] / GIB, "wall_s": res["wall_s"]}
    if host:      # the whole process: the arrays plus the tokenizer and the compiles' RSS
        result["host"] = {k: v / GIB for k, v in host.items()}
    return result


def _policy_dir(args, out: pathlib.Path, dtype: str) -> pathlib.Path:
    """--policy, or the stand-in this bench builds for `dtype` under --out."""
    return pathlib.Path(args.policy).expanduser() if args.policy else out / f"policy_{dtype}"


def bench_dtype(dtype: str, args, out: pathlib.Path) -> dict:
    from mle_rl.io import standin
    t0 = time.monotonic()
    policy_dir = _policy_dir(args, out, dtype)
    if not args.policy and not (policy_dir / "config.json").is_file():
        standin.build(policy_dir, preset=args.preset, dtype=dtype)
    build_s = time.monotonic() - t0
    py = sys.executable
    workdir = out / f"run_{dtype}"
    shutil.rmtree(workdir, ignore_errors=True)
    flags = _train_flags(args, policy_dir, dtype)
    t_start = time.time()
    run = run_timed([py, "experiments/run.py", *flags, f"--workdir={workdir}",
                     f"--max_steps={args.updates}", "--warm_pool=false", "--tensorboard=false",
                     f"--checkpoint_every={args.updates}", "--keep_checkpoints=1",
                     "--instrument=ast"], out / f"run_{dtype}.log")
    result = {"dtype": dtype, "build_s": build_s, "policy_gib": dir_gib(policy_dir),
              "run": run, "uptime": common.load_average()}
    if run["rc"] != 0:
        result["run_error"] = (out / f"run_{dtype}.log").read_text()[-3000:]
        return result
    rows, summary = run_files(workdir)
    phases, loop_start, summary = run_phases(rows, summary)
    phases["start-up (load policy, build learner)"] = loop_start - t_start
    phases["finish (checkpoint, export policy)"] = (t_start + run["wall_s"]) - (
        loop_start + summary["wall_s"])
    result.update(run_phases=phases, statuses=summary.get("statuses"),
                  checkpoints_gib=dir_gib(workdir / "checkpoints"),
                  exported_gib=dir_gib(workdir / "policy"), measured=measured_memory(rows, summary))
    if args.n:
        ev = run_timed([py, "experiments/evaluate.py", *_policy_flags(args, policy_dir, dtype),
                        f"--n={args.n}", f"--sample_batch={args.n}", "--improve=false",
                        f"--out={out / f'eval_{dtype}'}"], out / f"eval_{dtype}.log")
        result["eval"] = ev
        if ev["rc"] != 0:
            result["eval_error"] = (out / f"eval_{dtype}.log").read_text()[-3000:]
    if args.plan:
        result["plan"] = plan_memory(args, policy_dir, dtype, result["measured"]["padded"], out)
    return result


def _ratio(pred, meas) -> str:
    return f"{pred / meas:.2f}" if pred and meas > 0 else "-"


def plan_table(results: list, label: str) -> str:
    """One row per run: plan.py's predicted peaks next to the measured ones (GiB): the
    arrays alone (per device), and where plan.py measured them, the host process's (arrays +
    tokenizer + the compiles' RSS; see plan.py's docstring)."""
    lines = ["| model, dtype | padded lengths | trainer baseline | sampler: arrays / host / "
             "measured (host ratio) | update: arrays / host / measured (host ratio) |",
             "|---|---|---|---|---|"]
    for r in results:
        m, pl = r.get("measured"), r.get("plan")
        if not m or not pl or "error" in pl:
            continue
        host = pl.get("host") or {}
        cells = []
        for key, hkey in (("sampler_gib", "host_sampler"), ("update_gib", "host_update")):
            arrays, h, meas = pl[key] or 0, host.get(hkey), m[key]
            ratio = _ratio(h, meas) if h is not None else f"arrays {_ratio(arrays, meas)}"
            cells.append(f"{arrays:.2f} / {'-' if h is None else f'{h:.2f}'} / {meas:.2f} "
                         f"({ratio})")
        lines.append(f"| {label}, {r['dtype']} | {m['padded'][0]} + {m['padded'][1]} | "
                     f"{m['baseline_gib']:.2f} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def _gib(x) -> str:
    return f"{x:.1f}"


def report(results: list, label: str = "") -> str:
    lines = []
    for r in results:
        lines.append(f"\n### {r['dtype']}: policy {r['policy_gib']:.2f} GiB on disk "
                     f"(built in {r['build_s']:.0f} s); load average after the run {r['uptime']}")
        if "run_error" in r:
            lines.append(f"run.py FAILED (exit {r['run']['rc']}):\n```\n{r['run_error']}\n```")
            continue
        kids = ", ".join(f"{k} {_gib(v)}" for k, v in sorted(r["run"]["children_peak_gib"].items()))
        lines.append(f"\nrun.py: {r['run']['wall_s']:.0f} s, peak RSS: trainer "
                     f"{_gib(r['run']['peak_rss_gib'])} GiB; children {kids or 'not sampled'}; "
                     f"checkpoints {r['checkpoints_gib']:.2f} GiB, exported policy "
                     f"{r['exported_gib']:.2f} GiB; actions {r['statuses']}\n")
        lines.append("| phase | seconds |\n|---|---|")
        lines += [f"| {k} | {v:.1f} |" for k, v in r["run_phases"].items()]
        stages = ", ".join(f"{k} {v:.2f}" for k, v in r["measured"]["stages_gib"].items())
        lines.append(f"\ntrainer RSS at each stage of its start (GiB): {stages}")
        if "eval" in r:
            ev = r["eval"]
            status = "ok" if ev["rc"] == 0 else f"FAILED (exit {ev['rc']})"
            kids = ", ".join(f"{k} {_gib(v)}" for k, v in sorted(ev["children_peak_gib"].items()))
            lines.append(f"\nevaluate.py best-of-N: {status}, {ev['wall_s']:.0f} s, peak RSS "
                         f"{_gib(ev['peak_rss_gib'])} GiB; children {kids or 'not sampled'}")
            if "eval_error" in r:
                lines.append(f"```\n{r['eval_error']}\n```")
        if "plan" in r and "error" in r["plan"]:
            lines.append(f"plan.py FAILED:\n```\n{r['plan']['error']}\n```")
    table = plan_table(results, label)
    if table.count("\n") > 1:
        lines.append("\nplan.py against the run (peak RSS minus the trainer's RSS before "
                     "anything loads):\n\n" + table)
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--preset", default="qwen2p5_0p5b")
    ap.add_argument("--task", default="tabular-synth")
    ap.add_argument("--updates", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2, help="rollouts per update (= sample batch)")
    ap.add_argument("--n", type=int, default=4, help="best-of-N of the evaluation")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--minibatches", type=int, default=2,
                    help="optimizer steps per update (2: one sequence per step)")
    ap.add_argument("--critic", default="shared", choices=("shared", "separate"),
                    help="shared keeps float32 0.5B under ~14 GB (separate: +4 GB)")
    ap.add_argument("--remat", action=argparse.BooleanOptionalAction, default=True,
                    help="gradient checkpointing (same gradients; on XLA:CPU it does not "
                         "lower the compiled peak, see BUILD.md)")
    ap.add_argument("--policy", default=None, help="an HF policy directory to run instead of "
                    "building the stand-in (e.g. ~/.cache/mle_rl/policies/default)")
    ap.add_argument("--plan", action=argparse.BooleanOptionalAction, default=True,
                    help="run experiments/plan.py at the run's padded lengths and compare")
    ap.add_argument("--plan-extrapolate", default="",
                    help="plan.py --extrapolate_layers A,B (faster; '', the default, compiles "
                         "every layer, which the host figures need)")
    ap.add_argument("--replan", action="store_true",
                    help="run only plan.py again for the runs in --out/results.json (their "
                         "padded lengths; same --policy and flags) and rewrite the report")
    ap.add_argument("--out", default="runs/real_shapes")
    ap.add_argument("--run-flags", nargs="*", default=[], help="more run.py flags")
    args = ap.parse_args(argv)
    print(common.machine_report(), flush=True)
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    label = pathlib.Path(args.policy).name if args.policy else args.preset
    if args.replan:
        if not (out / "results.json").is_file():
            print(f"error: --replan needs the runs' {out / 'results.json'}", file=sys.stderr)
            return 2
        results = json.loads((out / "results.json").read_text())
        for r in results:
            if r.get("measured"):
                r["plan"] = plan_memory(args, _policy_dir(args, out, r["dtype"]), r["dtype"],
                                        r["measured"]["padded"], out)
        (out / "results.json").write_text(json.dumps(results, indent=2))
        print("\n## Summary" + report(results, label))
        return 1 if any("error" in r.get("plan", {}) for r in results) else 0
    results = []
    for dtype in args.dtypes.split(","):
        print(f"[real-shapes] {args.preset} {dtype} ...", flush=True)
        results.append(bench_dtype(dtype, args, out))
        (out / "results.json").write_text(json.dumps(results, indent=2))
        print(report(results[-1:], label), flush=True)
    print("\n## Summary" + report(results, label))
    return 0 if all(r["run"]["rc"] == 0 and r.get("eval", {"rc": 0})["rc"] == 0
                    for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
