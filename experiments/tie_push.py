"""How much of an RL run the max_at_k tie bug (fixed in session 54) touched, from its logs.

    python experiments/tie_push.py runs/<...>/rl/metrics.jsonl [...]

Correct max@k advantages (and RLOO's validity term) sum to zero over every group, so the
mean advantage over an update's sequences is zero. The old code gave a group whose best
score was shared by two programs one constant advantage of order one, with the sign of
that score; the mean per update, the sum over model families of share x mean advantage
(`family/<f>`, `advantage/<f>` in metrics.jsonl), shows it. Prints a markdown table.
"""
import json
import os
import pathlib
import sys

import numpy as np

THRESHOLD = 0.01   # a mean advantage beyond this is a push, not float32 rounding


def mean_advantage(row: dict) -> float:
    """The mean advantage over one update's sequences (0 for correct group advantages)."""
    fams = [k[len("family/"):] for k in row if k.startswith("family/")]
    return sum(row[f"family/{f}"] * row.get(f"advantage/{f}", 0.0) for f in fams)


def _names(paths: list) -> list:
    """Each run's seed folder (<...>/seed<k> of <...>/seed<k>/<rl|run>/metrics.jsonl), named by
    what tells it apart from the others, and at least by its last two parts."""
    dirs = [pathlib.Path(p).resolve().parent.parent for p in paths]
    common = pathlib.Path(os.path.commonpath(dirs)) if len(dirs) > 1 else dirs[0].parent.parent
    return [str(d.relative_to(common)) if len(d.relative_to(common).parts) >= 2
            else "/".join(d.parts[-2:]) for d in dirs]


def table(paths: list) -> str:
    lines = ["| run | updates | updates with a tie push (mean advantage beyond ±0.01) "
             "| mean advantage per sequence, first → last fifth |", "|---|---|---|---|"]
    for p, name in zip(map(pathlib.Path, paths), _names(paths)):
        rows = [json.loads(l) for l in p.read_text().splitlines() if l.strip()]
        a = np.array([mean_advantage(r) for r in rows])
        if not len(a):
            continue
        f = max(1, len(a) // 5)
        if not any(k.startswith("advantage/") for r in rows for k in r):
            # runs from before the per-family log (session 50): nothing to measure, not 0%
            lines.append(f"| {name} | {len(a)} | not logged (no `advantage/<family>`) | — |")
            continue
        lines.append(f"| {name} | {len(a)} | {np.mean(np.abs(a) > THRESHOLD):.0%} "
                     f"| {a[:f].mean():+.3f} → {a[-f:].mean():+.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print(table(sys.argv[1:]))
