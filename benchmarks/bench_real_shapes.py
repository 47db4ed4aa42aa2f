"""Real shapes end to end on CPU: a Qwen2.5-0.5B-shaped policy through run.py and evaluate.py.

For each --dtype: builds the stand-in checkpoint (`mle_rl/io/standin.py`: the real 0.5B
config, 24 layers, width 896, 151,936-entry tied embedding, random weights, with a trained
151,936-entry byte-level BPE and Qwen2.5's chat template), then runs, each in its own
process, `experiments/run.py` for --updates PPO updates and `experiments/evaluate.py`
best-of---n, and prints the time of each phase, the peak RSS of each process and the size
of what they wrote. Phases of run.py come from its metrics.jsonl and summary.json:
start-up (imports, loading the policy, building the learner), sampling, each update (the
first one compiles), and the finish (final checkpoint and the exported policy).

    python benchmarks/bench_real_shapes.py                       # bfloat16 and float32
    python benchmarks/bench_real_shapes.py --dtypes=bfloat16 --updates=2 --n=4

Defaults (batch 2, one sequence per optimizer step, 512 prompt + 64 new tokens, shared
critic) keep one process under ~12 GB: at 1024 + 128 tokens and one 2-row step the
bfloat16 update compiles to an 18 GiB peak on XLA:CPU (`experiments/plan.py`).

A random policy writes no working program (every action is an error); this measures the
plumbing at real shapes, not learning. No reference to compare with exists here (no GPU,
no checkpoint), so times are absolute: read them with the load printed above them.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import common

ROOT = pathlib.Path(__file__).resolve().parents[1]
GIB = 1 << 30


def run_timed(cmd, log_path: pathlib.Path, env=None) -> dict:
    """Runs `cmd`, its output to `log_path`; -> wall seconds, peak RSS (GiB), exit status."""
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss: KiB, of this process (run.py re-executes itself in place with tcmalloc).
    return {"wall_s": time.monotonic() - t0, "start": t0, "peak_rss_gib": usage.ru_maxrss / (1 << 20),
            "rc": proc.returncode}


def dir_gib(path: pathlib.Path) -> float:
    if not path.exists():
        return 0.0
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / GIB


def run_phases(workdir: pathlib.Path):
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines() if x]
    summary = json.loads((workdir / "summary.json").read_text())
    learner = [r["learner_busy_frac"] * r["wall_s"] for r in rows]
    sampler = rows[-1]["sampler_busy_frac"] * rows[-1]["wall_s"]
    loop_start = rows[0]["time"] - rows[0]["wall_s"]
    phases = {"start-up (load policy, build learner)": None, "sampling (all calls)": sampler}
    for i, cum in enumerate(learner):
        phases[f"update {i + 1}" + (" (compiles)" if i == 0 else "")] = cum - (
            learner[i - 1] if i else 0.0)
    phases["loop total"] = summary["wall_s"]
    return phases, loop_start, summary


def bench_dtype(dtype: str, args, out: pathlib.Path) -> dict:
    from mle_rl.io import standin
    policy_dir = out / f"policy_{dtype}"
    t0 = time.monotonic()
    if not (policy_dir / "config.json").is_file():
        standin.build(policy_dir, preset=args.preset, dtype=dtype)
    build_s = time.monotonic() - t0
    py = sys.executable
    workdir = out / f"run_{dtype}"
    shutil.rmtree(workdir, ignore_errors=True)
    common_flags = [f"--policy_dir={policy_dir}", f"--dtype={dtype}", f"--tasks={args.task}",
                    f"--max_prompt_tokens={args.prompt_tokens}",
                    f"--max_new_tokens={args.new_tokens}", "--num_actors=1"]
    t_start = time.time()
    run = run_timed([py, "experiments/run.py", *common_flags, f"--workdir={workdir}",
                     f"--max_steps={args.updates}", f"--batch_size={args.batch}",
                     f"--sample_batch={args.batch}", f"--max_in_flight={args.batch}",
                     f"--critic={args.critic}", f"--minibatches={args.minibatches}", "--warm_pool=false", "--tensorboard=false",
                     f"--checkpoint_every={args.updates}", "--keep_checkpoints=1",
                     "--instrument=ast", f"--remat={str(args.remat).lower()}", *args.run_flags],
                    out / f"run_{dtype}.log")
    result = {"dtype": dtype, "build_s": build_s, "policy_gib": dir_gib(policy_dir),
              "run": run}
    if run["rc"] != 0:
        result["run_error"] = (out / f"run_{dtype}.log").read_text()[-3000:]
        return result
    phases, loop_start, summary = run_phases(workdir)
    phases["start-up (load policy, build learner)"] = loop_start - t_start
    phases["finish (checkpoint, export policy)"] = (t_start + run["wall_s"]) - (
        loop_start + summary["wall_s"])
    result.update(run_phases=phases, statuses=summary.get("statuses"),
                  checkpoints_gib=dir_gib(workdir / "checkpoints"),
                  exported_gib=dir_gib(workdir / "policy"))
    ev = run_timed([py, "experiments/evaluate.py", *common_flags, f"--n={args.n}",
                    f"--sample_batch={args.n}", "--improve=false",
                    f"--out={out / f'eval_{dtype}'}"], out / f"eval_{dtype}.log")
    result["eval"] = ev
    if ev["rc"] != 0:
        result["eval_error"] = (out / f"eval_{dtype}.log").read_text()[-3000:]
    return result


def report(results: list) -> str:
    lines = []
    for r in results:
        lines.append(f"\n### {r['dtype']}: stand-in built in {r['build_s']:.0f} s, "
                     f"{r['policy_gib']:.2f} GiB on disk")
        if "run_error" in r:
            lines.append(f"run.py FAILED (exit {r['run']['rc']}):\n```\n{r['run_error']}\n```")
            continue
        lines.append(f"\nrun.py: {r['run']['wall_s']:.0f} s, peak RSS "
                     f"{r['run']['peak_rss_gib']:.1f} GiB; checkpoints "
                     f"{r['checkpoints_gib']:.2f} GiB, exported policy {r['exported_gib']:.2f} "
                     f"GiB; actions {r['statuses']}\n")
        lines.append("| phase | seconds |\n|---|---|")
        lines += [f"| {k} | {v:.1f} |" for k, v in r["run_phases"].items()]
        ev = r["eval"]
        status = "ok" if ev["rc"] == 0 else f"FAILED (exit {ev['rc']})"
        lines.append(f"\nevaluate.py best-of-N: {status}, {ev['wall_s']:.0f} s, peak RSS "
                     f"{ev['peak_rss_gib']:.1f} GiB")
        if "eval_error" in r:
            lines.append(f"```\n{r['eval_error']}\n```")
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
    ap.add_argument("--out", default="runs/real_shapes")
    ap.add_argument("--run-flags", nargs="*", default=[], help="more run.py flags")
    args = ap.parse_args(argv)
    print(common.machine_report(), flush=True)
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for dtype in args.dtypes.split(","):
        print(f"[real-shapes] {args.preset} {dtype} ...", flush=True)
        results.append(bench_dtype(dtype, args, out))
        (out / "results.json").write_text(json.dumps(results, indent=2))
        print(report(results[-1:]), flush=True)
    print("\n## Summary" + report(results))
    return 0 if all(r["run"]["rc"] == 0 and r.get("eval", {}).get("rc") == 0
                    for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
