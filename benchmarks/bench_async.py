"""Learner updates per hour: the asynchronous trainer vs a synchronous one, on actions whose
durations are heavy-tailed (lognormal, clipped to 0.5-60 s).

    python benchmarks/bench_async.py [--seconds 300] [--actors 16] [--batch 8]

Both trainers are the real `Trainer` (sampling, buffer, PPO updates, checkpoints) with a
random `micro` policy; only the actions are synthetic (they sleep, so the comparison is
about scheduling, not about the 2 CPU cores). The synchronous baseline samples a batch,
waits for all of its actions, then updates; the asynchronous one keeps `--actors` actions
in flight and updates as soon as any `--batch` are done.
"""

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from absl import flags  # noqa: E402

from mle_rl import config  # noqa: E402


def run(mode: str, a, workdir: str) -> dict:
    from mle_rl.agent.trainer import Trainer
    config.define_flags()
    argv = ["bench", f"--workdir={workdir}", "--policy_dir=random", "--model_preset=micro",
            f"--tasks={a.task}", f"--batch_size={a.batch}", f"--sample_batch={a.batch}",
            f"--max_in_flight={a.actors}", f"--num_actors={a.actors}", "--max_new_tokens=16",
            "--max_prompt_tokens=1200", "--max_steps=100000", f"--max_wall_s={a.seconds}",
            "--checkpoint_every=100000", "--warm_pool=false", "--tensorboard=false",
            "--critic=shared", f"--max_staleness={a.max_staleness}",
            f"--synchronous={'true' if mode == 'sync' else 'false'}"]
    flags.FLAGS.unparse_flags()
    flags.FLAGS(argv)
    cfg = config.from_flags(flags.FLAGS)
    work = dict(median_s=a.median_s, sigma=a.sigma, lo=0.5, hi=60.0)
    tr = Trainer(cfg, log=lambda *x: None, work_fn="async_work:sleepy", work_kwargs=work)
    summary = tr.run()
    rows = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
    last = rows[-1] if rows else {}
    return dict(mode=mode, updates=summary["updates"], wall_s=summary["wall_s"],
                updates_per_hour=3600 * summary["updates"] / max(summary["wall_s"], 1e-9),
                learner_busy=last.get("learner_busy_frac"),
                staleness=sum(r.get("staleness_mean", 0) for r in rows) / max(len(rows), 1),
                dropped=last.get("dropped_stale", 0),
                duration_mean=sum(r["duration_mean_s"] for r in rows) / max(len(rows), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--actors", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--median_s", type=float, default=4.0)
    ap.add_argument("--sigma", type=float, default=1.2)
    ap.add_argument("--max_staleness", type=int, default=4)
    ap.add_argument("--task", default="breast-cancer-diagnosis")
    a = ap.parse_args()
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("async", "sync"):
            res[mode] = run(mode, a, os.path.join(tmp, mode))
    print(f"actions: lognormal(median {a.median_s} s, sigma {a.sigma}) clipped to [0.5, 60] s; "
          f"batch {a.batch}; {a.actors} actors; {a.seconds:.0f} s per trainer")
    print(f"{'trainer':<8}{'updates':>8}{'upd/hour':>10}{'learner busy':>14}"
          f"{'mean Δt (s)':>13}{'staleness':>11}{'dropped':>9}")
    for m in ("async", "sync"):
        r = res[m]
        print(f"{m:<8}{r['updates']:>8}{r['updates_per_hour']:>10.0f}{r['learner_busy']:>14.3f}"
              f"{r['duration_mean']:>13.2f}{r['staleness']:>11.2f}{r['dropped']:>9}")
    ratio = res["async"]["updates_per_hour"] / max(res["sync"]["updates_per_hour"], 1e-9)
    print(f"async / sync updates per hour: {ratio:.2f}x")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
