"""Self-improvement, measured: on how many tasks does improving the best program so far beat
solving anew?

    python experiments/self_improve_share.py runs/self_improve/sft_*.json runs/self_improve/rl_*.json

Each argument is an `experiments/evaluate.py` JSON of a run with --improve (the paper's
protocol: half the samples solve from scratch, the other half improve the best valid
program found so far, in rounds). Per task and policy: the best of the solve samples, the
best of the improve samples, and which is better; then the share of (task, policy) pairs
where improving won, as in the paper's claim that self-improvement prompts add to best-of-N.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys


def best(scores, modes, mode, lower):
    vals = [s for s, m in zip(scores, modes) if m == mode and s is not None and math.isfinite(s)]
    if not vals:
        return None
    return min(vals) if lower else max(vals)


def labels(paths) -> list:
    """Each file's stem, or, where stems repeat (launch/ablations.sh's OUT/<variant>/seed<k>/
    eval.json), its two parent folders: "full/seed0"."""
    stems = [pathlib.Path(p).stem for p in paths]
    return [st if stems.count(st) == 1 else "/".join(pathlib.Path(p).parts[-3:-1])
            for p, st in zip(paths, stems)]


def main(argv) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    rows, wins, total = [], 0, 0
    for path, label in zip(argv, labels(argv)):
        data = json.loads(pathlib.Path(path).read_text())
        for tid, r in data.items():
            lower = r["is_lower_better"]
            s = best(r["scores"], r["modes"], "solve", lower)
            i = best(r["scores"], r["modes"], "improve", lower)
            n_s = sum(m == "solve" for m in r["modes"])
            n_i = sum(m == "improve" for m in r["modes"])
            won = None if s is None or i is None else (i < s if lower else i > s)
            if won is not None:
                total += 1
                wins += int(won)
            fmt = lambda x: "—" if x is None else f"{x:.4f}"   # noqa: E731
            rows.append(f"| {label} | {tid} | {r['metric']} "
                        f"{'↓' if lower else '↑'} | {fmt(s)} ({n_s}) | {fmt(i)} ({n_i}) | "
                        f"{'—' if won is None else 'improve' if won else 'solve'} |")
    print("| run | task | metric | best of solve (n) | best of improve (n) | better |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nImproving the best beat solving anew on {wins} of {total} (task, policy) pairs.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
