#!/usr/bin/env bash
# The whole story on a CPU machine, from nothing (hours on 2 cores): build the default policy
# (warm start); write the held-out tasks; then, for each task and each seed: best-of-N of the
# SFT policy, RL for a fixed number of updates, best-of-N of the RL policy (the same N and
# seed: matched samples); then a cross-task RL run per seed (ML-Agent's protocol: trained on
# procedural tasks, evaluated on the held-out ones); then the ablations (no duration weights,
# no instrumentation) on one task. Writes REPORT: mean ± std over seeds, reward curves, the
# model families chosen over training. `--dry-run` (or DRY_RUN=1) prints the plan only.
#
# Settings (environment variables; defaults in brackets):
#   TASKS        comma-separated tasks for per-task RL (built-in ids, or ids under TASK_DIR)
#                [the four held-out tasks of experiments/results/warm_start.md]
#   SEEDS        seeds; each gives one SFT evaluation, one RL run, one RL evaluation  [0 1 2]
#   STEPS        PPO updates per RL run (the budget; the same on any machine)          [30]
#   WALL         wall-clock cap per RL run, seconds                                  [1800]
#   N            best-of-N before and after RL                                         [32]
#   POLICY       the SFT policy every run starts from                              [default]
#   TASK_DIR     where the held-out tasks are written            [OUT/heldout_tasks]
#   CROSS_TRAIN  number of procedural tasks (env/procedural) the cross-task run trains on,
#                0 to skip it                                                          [16]
#   CROSS_EVAL   tasks the cross-task policy is evaluated on                    [TASKS]
#   CROSS_STEPS  its budget in updates                                                 [60]
#   ABL_TASK, ABL_VARIANTS, ABL_SEEDS   the ablations [first of TASKS;
#                no_duration_weights no_instrumentation; SEEDS]; "full" is the per-task run
#   OUT          runs: OUT/<task>/seed<k>/{before.*,rl/,after.*}, OUT/cross/seed<k>/,
#                OUT/ablations/                                          [runs/cpu_demo]
#   REPORT       the markdown report                     [experiments/results/cpu_demo.md]
#   WARM_FLAGS   flags for launch/warm_start.sh ["--eval_samples=0 --report_dir=OUT/warm_start"]
#   EXTRA_FLAGS  more flags for run.py AND evaluate.py;  EVAL_FLAGS  evaluate.py only
#   FORCE=1      redo steps whose output exists (by default a restarted demo skips them)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cpu_only

FORCE="${FORCE:-0}"
parse_dry_run "$@"
HELDOUT="heldout-pima-diabetes,heldout-glass-type,heldout-school-scores,heldout-cpu-performance"
TASKS="${TASKS:-$HELDOUT}"
SEEDS="${SEEDS:-0 1 2}"
STEPS="${STEPS:-30}"
WALL="${WALL:-1800}"
N="${N:-32}"
POLICY="${POLICY:-default}"
OUT="${OUT:-runs/cpu_demo}"
TASK_DIR="${TASK_DIR:-$OUT/heldout_tasks}"
CROSS_TRAIN="${CROSS_TRAIN:-16}"
CROSS_EVAL="${CROSS_EVAL:-$TASKS}"
CROSS_STEPS="${CROSS_STEPS:-60}"
IFS=',' read -r -a tasks <<< "$TASKS"
ABL_TASK="${ABL_TASK:-${tasks[0]}}"
ABL_VARIANTS="${ABL_VARIANTS:-no_duration_weights no_instrumentation}"
ABL_SEEDS="${ABL_SEEDS:-$SEEDS}"
REPORT="${REPORT:-experiments/results/cpu_demo.md}"
WARM_FLAGS="${WARM_FLAGS:---eval_samples=0 --report_dir=$OUT/warm_start}"
EXTRA_FLAGS="${EXTRA_FLAGS:-}"
EVAL_FLAGS="${EVAL_FLAGS:-}"
read -r -a warm <<< "$WARM_FLAGS"
read -r -a extra <<< "--task_dir=$TASK_DIR $EXTRA_FLAGS"
read -r -a evalx <<< "$EVAL_FLAGS"
IFS=',' read -r -a cross_eval <<< "$CROSS_EVAL"

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

evaluate() {   # evaluate POLICY TASKS SEED PREFIX
  step_once "$4.json" "$4.log" "$PY" experiments/evaluate.py "--seed=$3" \
    ${undefok:+"--undefok=$undefok"} "${extra[@]}" "${evalx[@]}" "--tasks=$2" "--n=$N" \
    "--policy_dir=$1" "--out=$4"
}

train() {   # train TASKS SEED STEPS WORKDIR
  step_once "$4/summary.json" "$4.log" "$PY" experiments/run.py \
    --flagfile=experiments/tabular.flags "--tasks=$1" "--seed=$2" "--max_steps=$3" \
    "--max_wall_s=$WALL" "--policy_dir=$POLICY" "${extra[@]}" "--workdir=$4"
}

n_seeds=$(wc -w <<< "$SEEDS")
n_abl=$(( $(wc -w <<< "$ABL_VARIANTS") * $(wc -w <<< "$ABL_SEEDS") ))
echo "[cpu_demo] plan: warm start (~30 min), then ${#tasks[@]} tasks x $n_seeds seeds x" \
     "(best-of-$N, RL $STEPS updates, best-of-$N), a cross-task run per seed on $CROSS_TRAIN" \
     "procedural tasks ($CROSS_STEPS updates), $n_abl ablation runs on $ABL_TASK." \
     "Runs: $OUT; report: $REPORT"
if [[ "$DRY_RUN" != 1 ]]; then
  mkdir -p "$OUT"
  printf '{"tasks": [%s], "seeds": [%s], "n": %s, "steps": %s, "wall_s": %s, "cross_train": %s, "cross_steps": %s, "machine": "%s CPU cores, %s"}\n' \
    "$(printf '"%s",' "${tasks[@]}" | sed 's/,$//')" "$(sed 's/ /, /g' <<< "$SEEDS")" "$N" \
    "$STEPS" "$WALL" "$CROSS_TRAIN" "$CROSS_STEPS" "$(nproc)" "$(uname -sm)" \
    > "$OUT/cpu_demo.json"
fi

echo "[cpu_demo] 1. the default policy (warm start; reused when current)"
run "$OUT/warm_start.log" bash launch/warm_start.sh "${warm[@]}"
echo "[cpu_demo] 2. the held-out tasks (never seen by the warm start) into $TASK_DIR"
step_once "$TASK_DIR/heldout-cpu-performance/task.json" "$OUT/heldout.log" \
  "$PY" -m mle_rl.env.procedural.heldout "$TASK_DIR"

step=3
for t in "${tasks[@]}"; do
  echo "[cpu_demo] $step. $t: per seed, best-of-$N of the SFT policy, RL for $STEPS updates," \
       "best-of-$N after"
  for s in $SEEDS; do
    d="$OUT/$t/seed$s"
    evaluate "$POLICY" "$t" "$s" "$d/before"
    train "$t" "$s" "$STEPS" "$d/rl"
    evaluate "$d/rl/policy" "$t" "$s" "$d/after"
  done
  step=$((step + 1))
done

if [[ "$CROSS_TRAIN" -gt 0 ]]; then
  echo "[cpu_demo] $step. cross-task RL: $CROSS_TRAIN procedural tasks, $CROSS_STEPS updates;" \
       "best-of-$N on $CROSS_EVAL"
  if [[ "$DRY_RUN" == 1 ]]; then
    cross_tasks="<the first $CROSS_TRAIN procedural tasks>"
  else
    cross_tasks=$("$PY" -m mle_rl.env.procedural.generate "$CROSS_TRAIN" | paste -sd, -)
  fi
  for s in $SEEDS; do
    d="$OUT/cross/seed$s"
    train "$cross_tasks" "$s" "$CROSS_STEPS" "$d/rl"
    for t in "${cross_eval[@]}"; do
      evaluate "$d/rl/policy" "$t" "$s" "$d/after_$t"
      # the SFT side of the comparison: the per-task run's, or its own
      if [[ ! -e "$OUT/$t/seed$s/before.json" ]]; then evaluate "$POLICY" "$t" "$s" "$d/before_$t"; fi
    done
  done
  step=$((step + 1))
fi

# The ablations' "full" runs are the per-task runs of ABL_TASK (same command): linked.
if [[ "$DRY_RUN" != 1 ]]; then
  for s in $ABL_SEEDS; do
    src="$OUT/$ABL_TASK/seed$s"
    if [[ -e "$src/rl/summary.json" && -e "$src/after.json" ]]; then
      full="$OUT/ablations/full/seed$s"
      mkdir -p "$full"
      ln -sfn "$(cd "$src" && pwd)/rl" "$full/run"
      ln -sf "$(cd "$src" && pwd)/after.json" "$full/eval.json"
    fi
  done
fi
echo "[cpu_demo] $step. ablations on $ABL_TASK: $ABL_VARIANTS; seeds $ABL_SEEDS; $STEPS updates each"
BASE_CKPT="$POLICY" TASK="$ABL_TASK" FLAGFILE=experiments/tabular.flags VARIANTS="$ABL_VARIANTS" \
  SEEDS="$ABL_SEEDS" STEPS="$STEPS" WALL="$WALL" N="$N" OUT="$OUT/ablations" \
  EXTRA_FLAGS="${extra[*]}" EVAL_FLAGS="$EVAL_FLAGS" DRY_RUN="$DRY_RUN" \
  bash launch/ablations.sh || echo "[cpu_demo] some ablation runs failed (see their logs)"

echo "[cpu_demo] $((step + 1)). the report"
run /dev/null "$PY" experiments/report.py cpu_demo "--out_dir=$OUT" "--out=$REPORT"
if [[ "$DRY_RUN" == 1 ]]; then
  echo "[cpu_demo] dry run: nothing was run; the report would be $REPORT"
else
  echo "[cpu_demo] report: $REPORT"
fi
