"""How far the generic programs' grammar reaches on a set of MLE-bench-layout tasks, without
a policy: K choices per task dealt by `generic.sample_choices` (the corpus's own dealer,
with the text and image decisions where the task has text or pictures), each run in the
sandbox; per task the valid count and the best score against the sample submission's.

    python -m mle_rl.env.standins --out runs/standins/data        # the 20 stand-ins
    python experiments/grammar_reach.py --mlebench_dir=runs/standins/data --k=6

What a policy trained on these programs could reach on each task when it picks well; not a
policy's result (`experiments/evaluate.py` measures those).
"""

import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
    from mle_rl.agent.evaluation import sample_submission_score
    from mle_rl.env import action, mlebench
    from mle_rl.env.rewards import graded
    from mle_rl.warmstart import generic

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mlebench_dir", required=True)
    ap.add_argument("--k", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tasks", default=",".join(sorted(mlebench.SPECS)))
    args = ap.parse_args(argv)
    print("| competition | valid | best | sample submission | beats it |\n|---|---|---|---|---|")
    n_beat = 0
    ids = [t for t in args.tasks.split(",") if t]
    for cid in ids:
        task = mlebench.make_task(args.mlebench_dir, cid)
        picks = generic.sample_choices(task.metric, args.k, random.Random(args.seed),
                                       text=generic.has_text(task.public_dir),
                                       images=generic.has_images(task.public_dir))
        ok, best = 0, None
        for c in picks:
            plan, code = generic.render(c)
            r = action.run_code(task, code, plan=plan, instrumenter="ast")
            if graded(r.status, r.score):
                ok += 1
                if best is None or (r.score < best if task.is_lower_better else r.score > best):
                    best = r.score
        base = sample_submission_score(task)
        beats = best is not None and (base is None or (
            best < base if task.is_lower_better else best > base))
        n_beat += beats
        print(f"| {cid} | {ok}/{len(picks)} | {'-' if best is None else f'{best:.4f}'} | "
              f"{'refused' if base is None else f'{base:.4f}'} | {'yes' if beats else 'no'} |",
              flush=True)
    print(f"\nbetter than the sample submission: {n_beat} of {len(ids)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
