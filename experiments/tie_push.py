"""How much of an RL run the max_at_k tie bug (fixed in session 54) touched, from its logs.

    python experiments/tie_push.py runs/<...>/rl/metrics.jsonl [...]

Correct max@k advantages (and RLOO's validity term) sum to zero over every group, so the
mean advantage over an update's sequences is zero. The old code gave a group whose best
score was shared by two programs one constant advantage of order one, with the sign of
that score; the mean per update, the sum over model families of share x mean advantage
(`family/<f>`, `advantage/<f>` in metrics.jsonl), shows it. Prints a markdown table.
"""
import json
import pathlib
import sys

import numpy as np

THRESHOLD = 0.01   # a mean advantage beyond this is a push, not float32 rounding


def mean_advantage(row: dict) -> float:
    """The mean advantage over one update's sequences (0 for correct group advantages)."""
    fams = [k[len("family/"):] for k in row if k.startswith("family/")]
    return sum(row[f"family/{f}"] * row.get(f"advantage/{f}", 0.0) for f in fams)


def table(paths: list) -> str:
    lines = ["| run | updates | updates with a tie push (mean advantage beyond ±0.01) "
             "| mean advantage per sequence, first → last fifth |", "|---|---|---|---|"]
    for p in map(pathlib.Path, paths):
        rows = [json.loads(l) for l in p.read_text().splitlines() if l.strip()]
        a = np.array([mean_advantage(r) for r in rows])
        if not len(a):
            continue
        f = max(1, len(a) // 5)
        name = "/".join(p.parts[-4:-2])    # <task>/seed<k> of .../<task>/seed<k>/rl/metrics.jsonl
        lines.append(f"| {name} | {len(a)} | {np.mean(np.abs(a) > THRESHOLD):.0%} "
                     f"| {a[:f].mean():+.3f} → {a[-f:].mean():+.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print(table(sys.argv[1:]))
