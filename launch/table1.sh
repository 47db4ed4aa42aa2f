#!/usr/bin/env bash
# RL for MLE agents, Table 1: for every paper task whose MLE-bench data and base checkpoint
# are on disk, train with the paper flagfile (experiments/paper/<task>.flags), evaluate
# best-of-N in both modes (solve; improve the best so far) and write a markdown table with
# the paper's number beside ours. A task whose data or weights are missing is listed with
# what to prepare and how (BUILD.md), and skipped: nothing is run or reported for it.
#
# Settings (environment variables; defaults in brackets):
#   MLEBENCH_DIR  prepared MLE-bench data, <dir>/<id>/prepared/{public,private} [data/mlebench]
#   BASE_CKPT     Qwen2.5-3B in HF format                [checkpoints/Qwen2.5-3B-Instruct]
#   OUT           output dir: OUT/<task>/{run,eval.*,*.log}, OUT/table1.md   [runs/table1]
#   TASKS         comma-separated paper task ids         [every experiments/paper/*.flags]
#   N             samples per task in the evaluation (best-of-N)                    [128]
#   STEPS, WALL   override the flagfile's --max_steps / --max_wall_s          [flagfile's]
#   SEED          training and evaluation seed                                        [0]
#   EXTRA_FLAGS   more flags for run.py AND evaluate.py (each ignores those it lacks)
#   EVAL_FLAGS    more flags for evaluate.py only
#   FORCE=1       retrain a task that already has OUT/<task>/run/summary.json
# A run interrupted midway continues from its latest checkpoint (--resume) when restarted.
# Exit status: 0 when every runnable task trained and evaluated (or none could run), else 1.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MLEBENCH_DIR="${MLEBENCH_DIR:-data/mlebench}"
BASE_CKPT="${BASE_CKPT:-checkpoints/Qwen2.5-3B-Instruct}"
OUT="${OUT:-runs/table1}"
TASKS="${TASKS:-}"
N="${N:-128}"
STEPS="${STEPS:-}"
WALL="${WALL:-}"
SEED="${SEED:-0}"
FORCE="${FORCE:-0}"
read -r -a extra <<< "${EXTRA_FLAGS:-}"
read -r -a evalx <<< "${EVAL_FLAGS:-}"

# Names of the EXTRA_FLAGS, so evaluate.py may skip the training-only ones (absl --undefok).
undefok=""
for f in "${extra[@]}"; do
  name="${f#--}"; name="${name%%=*}"
  undefok+="${undefok:+,}$name"
  if [[ "$name" == no* ]]; then undefok+=",${name#no}"; fi
done

echo "[table1] data: $MLEBENCH_DIR; base checkpoint: $BASE_CKPT; out: $OUT; best-of-$N"
mkdir -p "$OUT"
ready="$("$PY" experiments/report.py check --out_dir="$OUT" \
  --mlebench_dir="$MLEBENCH_DIR" --base_ckpt="$BASE_CKPT" --tasks="$TASKS")"
present=()
for t in $ready; do present+=("$t"); done
if [[ ${#present[@]} -eq 0 ]]; then
  echo "[table1] no paper task has both its data and the base checkpoint; nothing to run."
fi

failed=0
for t in "${present[@]}"; do
  d="$OUT/$t"
  mkdir -p "$d"
  train=("$PY" experiments/run.py "--flagfile=experiments/paper/$t.flags"
         "--mlebench_dir=$MLEBENCH_DIR" "--policy_dir=$BASE_CKPT" "--seed=$SEED")
  if [[ -n "$STEPS" ]]; then train+=("--max_steps=$STEPS"); fi
  if [[ -n "$WALL" ]]; then train+=("--max_wall_s=$WALL"); fi
  train+=("${extra[@]}" "--workdir=$d/run")
  if [[ -f "$d/run/summary.json" && "$FORCE" != 1 ]]; then
    echo "[table1] $t: already trained ($d/run/summary.json); FORCE=1 retrains"
  else
    if [[ -n "$(ls -A "$d/run/checkpoints" 2>/dev/null)" ]]; then train+=(--resume); fi
    echo "[table1] $t: training"
    echo "+ ${train[*]}"
    if ! "${train[@]}" 2>&1 | tee "$d/train.log"; then
      echo "training failed (log: $d/train.log)" > "$d/outcome.txt"
      echo "[table1] $t: training FAILED; see $d/train.log"
      failed=1
      continue
    fi
  fi
  ev=("$PY" experiments/evaluate.py "--mlebench_dir=$MLEBENCH_DIR" --max_prompt_tokens=1024
      --max_new_tokens=1024 --sample_batch=64 "--seed=$SEED"
      ${undefok:+"--undefok=$undefok"} "${extra[@]}" "${evalx[@]}"
      "--policy_dir=$d/run/policy" "--tasks=$t" "--n=$N" "--out=$d/eval")
  echo "[table1] $t: best-of-$N evaluation (solve + improve)"
  echo "+ ${ev[*]}"
  if ! "${ev[@]}" 2>&1 | tee "$d/eval.log"; then
    echo "evaluation failed (log: $d/eval.log)" > "$d/outcome.txt"
    echo "[table1] $t: evaluation FAILED; see $d/eval.log"
    failed=1
    continue
  fi
  echo "ok" > "$d/outcome.txt"
done

"$PY" experiments/report.py table1 --out_dir="$OUT" --out="$OUT/table1.md" > /dev/null
echo "[table1] table: $OUT/table1.md"
exit "$failed"
