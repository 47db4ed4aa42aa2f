#!/usr/bin/env bash
# The whole story on a CPU machine, from nothing (hours on 2 cores): build the default policy
# (warm start), then for each task: best-of-N of that SFT policy, RL for a fixed wall-clock
# budget, best-of-N of the RL policy; then the ablations (no duration weights, no
# instrumentation) on the synthetic tabular task. Writes REPORT (tables, reward curves, the
# model families chosen over training). `--dry-run` (or DRY_RUN=1) prints the plan only.
#
# Settings (environment variables; defaults in brackets):
#   TASKS        comma-separated built-in tasks
#                [tabular-synth,docstring-authorship,breast-cancer-diagnosis,penguin-island]
#   WALL         RL wall-clock budget per task, seconds                            [1800]
#   STEPS        cap on PPO updates per task (set high: the wall clock decides)   [100000]
#   N            best-of-N before and after RL                                        [32]
#   SEED         seed of the RL runs and evaluations                                   [0]
#   ABL_TASK, ABL_VARIANTS, ABL_SEEDS, ABL_WALL   the ablations [tabular-synth;
#                full no_duration_weights no_instrumentation; 0 1 2; 1200]
#   OUT          runs: OUT/<task>/{before.*,rl/,after.*}, OUT/ablations/   [runs/cpu_demo]
#   REPORT       the markdown report                     [experiments/results/cpu_demo.md]
#   WARM_FLAGS   flags for launch/warm_start.sh ["--eval_samples=0 --report_dir=OUT/warm_start":
#                we evaluate here, and experiments/results/warm_start.md stays as it is]
#   EXTRA_FLAGS  more flags for run.py AND evaluate.py;  EVAL_FLAGS  evaluate.py only
#   FORCE=1      redo steps whose output exists (by default a restarted demo skips them)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cpu_only

FORCE="${FORCE:-0}"
parse_dry_run "$@"
TASKS="${TASKS:-tabular-synth,docstring-authorship,breast-cancer-diagnosis,penguin-island}"
WALL="${WALL:-1800}"
STEPS="${STEPS:-100000}"
N="${N:-32}"
SEED="${SEED:-0}"
ABL_TASK="${ABL_TASK:-tabular-synth}"
ABL_VARIANTS="${ABL_VARIANTS:-full no_duration_weights no_instrumentation}"
ABL_SEEDS="${ABL_SEEDS:-0 1 2}"
ABL_WALL="${ABL_WALL:-1200}"
OUT="${OUT:-runs/cpu_demo}"
REPORT="${REPORT:-experiments/results/cpu_demo.md}"
WARM_FLAGS="${WARM_FLAGS:---eval_samples=0 --report_dir=$OUT/warm_start}"
EXTRA_FLAGS="${EXTRA_FLAGS:-}"
EVAL_FLAGS="${EVAL_FLAGS:-}"
read -r -a warm <<< "$WARM_FLAGS"
read -r -a extra <<< "$EXTRA_FLAGS"
read -r -a evalx <<< "$EVAL_FLAGS"
IFS=',' read -r -a tasks <<< "$TASKS"

undefok=""
for f in "${extra[@]}"; do
  name="${f#--}"; name="${name%%=*}"
  undefok+="${undefok:+,}$name"
  if [[ "$name" == no* ]]; then undefok+=",${name#no}"; fi
done

run() {   # print a command, then run it (unless DRY_RUN=1), its output also into a log
  local log="$1"; shift
  printf '+'; printf ' %q' "$@"; printf '\n'
  if [[ "$DRY_RUN" == 1 ]]; then return 0; fi
  mkdir -p "$(dirname "$log")"
  "$@" 2>&1 | tee "$log"
}

step_once() {   # step_once OUTPUT LOG CMD...: run CMD unless OUTPUT exists (FORCE=1 redoes)
  local out="$1"; shift
  if [[ -e "$out" && "$FORCE" != 1 ]]; then echo "[cpu_demo] done already: $out"; return 0; fi
  run "$@"
}

n_abl=$(( $(wc -w <<< "$ABL_VARIANTS") * $(wc -w <<< "$ABL_SEEDS") ))
echo "[cpu_demo] plan: warm start (~20 min), then ${#tasks[@]} tasks x (best-of-$N, RL" \
     "$WALL s, best-of-$N), then $n_abl ablation runs x $ABL_WALL s on $ABL_TASK;" \
     "at least $(( (1200 + ${#tasks[@]} * WALL + n_abl * ABL_WALL) / 60 )) min of" \
     "training before evaluations. Runs: $OUT; report: $REPORT"
if [[ "$DRY_RUN" != 1 ]]; then
  mkdir -p "$OUT"
  printf '{"tasks": [%s], "n": %s, "wall_s": %s, "machine": "%s CPU cores, %s"}\n' \
    "$(printf '"%s",' "${tasks[@]}" | sed 's/,$//')" "$N" "$WALL" "$(nproc)" "$(uname -sm)" \
    > "$OUT/cpu_demo.json"
fi

echo "[cpu_demo] 1. the default policy (warm start; reused when current)"
run "$OUT/warm_start.log" bash launch/warm_start.sh "${warm[@]}"

step=2
for t in "${tasks[@]}"; do
  d="$OUT/$t"
  evbase=("$PY" experiments/evaluate.py "--seed=$SEED" ${undefok:+"--undefok=$undefok"}
          "${extra[@]}" "${evalx[@]}" "--tasks=$t" "--n=$N")
  echo "[cpu_demo] $step. $t: best-of-$N of the SFT policy, RL for $WALL s, best-of-$N after"
  step_once "$d/before.json" "$d/before.log" "${evbase[@]}" --policy_dir=default \
    "--out=$d/before"
  step_once "$d/rl/summary.json" "$d/train.log" "$PY" experiments/run.py --flagfile=experiments/tabular.flags \
    "--tasks=$t" "--seed=$SEED" "--max_steps=$STEPS" "--max_wall_s=$WALL" "${extra[@]}" \
    "--workdir=$d/rl"
  step_once "$d/after.json" "$d/after.log" "${evbase[@]}" "--policy_dir=$d/rl/policy" "--out=$d/after"
  step=$((step + 1))
done

# The ablations' "full" run with the demo's seed is the same command as the demo's own RL run
# on that task when the budgets match: link that run and its evaluation instead of redoing it.
if [[ "$DRY_RUN" != 1 && ",$TASKS," == *",$ABL_TASK,"* && "$ABL_WALL" == "$WALL" \
      && " $ABL_SEEDS " == *" $SEED "* && " $ABL_VARIANTS " == *" full "* \
      && -e "$OUT/$ABL_TASK/rl/summary.json" && -e "$OUT/$ABL_TASK/after.json" ]]; then
  full="$OUT/ablations/full/seed$SEED"
  src="$(cd "$OUT/$ABL_TASK" && pwd)"
  mkdir -p "$full"
  ln -sfn "$src/rl" "$full/run"
  ln -sf "$src/after.json" "$full/eval.json"
  echo "[cpu_demo] ablation full/seed$SEED is the RL run of $ABL_TASK above (linked, not rerun)"
fi
echo "[cpu_demo] $step. ablations on $ABL_TASK: $ABL_VARIANTS; seeds $ABL_SEEDS; $ABL_WALL s each"
TASK="$ABL_TASK" FLAGFILE=experiments/tabular.flags VARIANTS="$ABL_VARIANTS" \
  SEEDS="$ABL_SEEDS" STEPS="$STEPS" WALL="$ABL_WALL" N="$N" OUT="$OUT/ablations" \
  EXTRA_FLAGS="$EXTRA_FLAGS" EVAL_FLAGS="$EVAL_FLAGS" DRY_RUN="$DRY_RUN" \
  bash launch/ablations.sh || echo "[cpu_demo] some ablation runs failed (see their logs)"

echo "[cpu_demo] $((step + 1)). the report"
run /dev/null "$PY" experiments/report.py cpu_demo "--out_dir=$OUT" "--out=$REPORT"
if [[ "$DRY_RUN" == 1 ]]; then
  echo "[cpu_demo] dry run: nothing was run; the report would be $REPORT"
else
  echo "[cpu_demo] report: $REPORT"
fi
