#!/usr/bin/env bash
# The default policy on small stand-ins of the 20 MLE-bench competitions we grade, each in
# that competition's exact public layout (mle_rl/env/standins: file names, columns, JSON,
# zip, 7z, image folders as `mlebench prepare` writes them; data from installed packages):
# builds them, samples N programs per competition with evaluate.py and writes the report
# (every row: valid programs, best score, the sample submission's score, the commonest
# failure). Restarted, it keeps the stand-ins on disk. `--dry-run`: the commands only.
#
# Settings (environment variables; defaults in brackets):
#   OUT       the stand-ins (OUT/data) and the evaluation (OUT/eval.{md,json,log})  [runs/standins]
#   N         programs per competition                                              [32]
#   TIMEOUT   each program's time limit, seconds (the competitions' own is an hour)    [300]
#   POLICY    the policy                                                       [default]
#   IDS       comma-separated competition ids                        [all 20 of mlebench.py]
#   REPORT    the markdown report          [experiments/results/mlebench_standins.md]
#   EVAL_FLAGS  more flags for evaluate.py
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cpu_only
parse_dry_run "$@"
OUT="${OUT:-runs/standins}"
N="${N:-32}"
TIMEOUT="${TIMEOUT:-300}"
POLICY="${POLICY:-default}"
REPORT="${REPORT:-experiments/results/mlebench_standins.md}"
read -r -a evalx <<< "${EVAL_FLAGS:-}"
if [[ -z "${IDS:-}" ]]; then
  IDS=$("$PY" -c 'from mle_rl.env import mlebench; print(",".join(mlebench.SPECS))')
fi

step() {   # step CMD...: print it; run it unless a dry run
  printf '+'; printf ' %q' "$@"; printf '\n'
  [[ "$DRY_RUN" == 1 ]] || "$@"
}

if [[ -d "$OUT/data" && "${FORCE:-0}" != 1 ]]; then
  echo "[standins] kept: $OUT/data (FORCE=1 rebuilds)"
else
  step "$PY" -m mle_rl.env.standins --out "$OUT/data" --ids "$IDS"
fi
step "$PY" experiments/evaluate.py --mlebench_dir="$OUT/data" --tasks="$IDS" --n="$N" \
  --improve=false --timeout_s="$TIMEOUT" --policy_dir="$POLICY" --out="$OUT/eval" ${evalx[@]+"${evalx[@]}"}
step "$PY" experiments/standins_report.py --eval="$OUT/eval.json" --out="$REPORT"
