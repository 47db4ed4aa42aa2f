#!/usr/bin/env bash
# The RL-for-MLE paper's ablations on one task: the full method, then the same run without
# duration weights, without instrumentation (no partial credit) and without self-improvement
# prompts; every run gets the same budget, for several seeds; each trained policy is
# evaluated best-of-N (both modes). Writes OUT/ablations.md (mean ± std over seeds).
#
# Settings (environment variables; defaults in brackets):
#   TASK          task id: a built-in one or a paper task                      [tabular-synth]
#   FLAGFILE      base settings [experiments/paper/$TASK.flags if it exists, else
#                 experiments/tabular.flags]
#   VARIANTS      space-separated subset of: full no_duration_weights no_instrumentation
#                 no_self_improve                                              [all four]
#   SEEDS         space-separated seeds                                           [0 1 2]
#   STEPS, WALL   budget per run: --max_steps / --max_wall_s              [flagfile's]
#   N             evaluation samples (best-of-N)                                     [32]
#   OUT           OUT/<variant>/seed<k>/{run,eval.*,*.log}, OUT/ablations.md
#                                                                  [runs/ablations/$TASK]
#   MLEBENCH_DIR, BASE_CKPT   --mlebench_dir / --policy_dir for run.py   [flagfile's]
#   EXTRA_FLAGS   more flags for run.py AND evaluate.py (each ignores those it lacks);
#                 they cannot undo an ablation (its flag comes after them)
#   EVAL_FLAGS    more flags for evaluate.py only
#   DRY_RUN=1     print the commands, run nothing
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TASK="${TASK:-tabular-synth}"
if [[ -z "${FLAGFILE:-}" ]]; then
  FLAGFILE=experiments/tabular.flags
  if [[ -f "experiments/paper/$TASK.flags" ]]; then FLAGFILE="experiments/paper/$TASK.flags"; fi
  if [[ -f "experiments/paper/$TASK.flags" && -z "${MLEBENCH_DIR:-}" ]]; then
    MLEBENCH_DIR=data/mlebench      # the paper flagfiles' own value, for evaluate.py too
  fi
fi
VARIANTS="${VARIANTS:-full no_duration_weights no_instrumentation no_self_improve}"
SEEDS="${SEEDS:-0 1 2}"
STEPS="${STEPS:-}"
WALL="${WALL:-}"
N="${N:-32}"
OUT="${OUT:-runs/ablations/$TASK}"
MLEBENCH_DIR="${MLEBENCH_DIR:-}"
BASE_CKPT="${BASE_CKPT:-}"
DRY_RUN="${DRY_RUN:-0}"
read -r -a extra <<< "${EXTRA_FLAGS:-}"
read -r -a evalx <<< "${EVAL_FLAGS:-}"
if [[ ! -f "$FLAGFILE" ]]; then
  echo "error: flagfile $FLAGFILE not found; set FLAGFILE to an existing one." >&2; exit 2
fi

undefok=""
for f in "${extra[@]}"; do
  name="${f#--}"; name="${name%%=*}"
  undefok+="${undefok:+,}$name"
  if [[ "$name" == no* ]]; then undefok+=",${name#no}"; fi
done

ablation_flags() {   # the one flag that switches an idea of the paper off
  case "$1" in
    full) ;;
    no_duration_weights) echo "--duration_weights=false" ;;
    no_instrumentation) echo "--instrument=none" ;;
    no_self_improve) echo "--self_improve=0" ;;
    *) echo "error: unknown variant '$1'; use full, no_duration_weights, no_instrumentation" \
            "or no_self_improve." >&2; return 2 ;;
  esac
}
for v in $VARIANTS; do ablation_flags "$v" > /dev/null; done

run() {   # print a command, then run it (unless DRY_RUN=1), its output also into a log
  local log="$1"; shift
  printf '+'; printf ' %q' "$@"; printf '\n'
  if [[ "$DRY_RUN" == 1 ]]; then return 0; fi
  "$@" 2>&1 | tee "$log"
}

echo "[ablations] task $TASK, flagfile $FLAGFILE, variants: $VARIANTS; seeds: $SEEDS;" \
     "budget: ${STEPS:-flagfile} steps, ${WALL:-flagfile} s per run; best-of-$N; out: $OUT"
if [[ "$DRY_RUN" != 1 ]]; then
  mkdir -p "$OUT"
  # OUT/ablations.json: the task, and one record per invocation (runs of one OUT are often
  # started seed by seed); another task in the same OUT would mix two tables: refused.
  "$PY" - "$OUT/ablations.json" "$TASK" "$FLAGFILE" "$VARIANTS" "$SEEDS" "${STEPS:-flagfile}" \
      "${WALL:-flagfile}" "$N" "${BASE_CKPT:-flagfile}" "${EXTRA_FLAGS:-}" "${EVAL_FLAGS:-}" <<'PYEOF' || exit 2
import json, os, sys, time
path, task, flagfile, variants, seeds, steps, wall, n, base, extra, evalx = sys.argv[1:]
meta = {"task": task, "runs": []}
if os.path.exists(path):
    old = json.load(open(path))
    if old.get("task") != task:
        sys.exit(f"error: {path} holds the ablations of task {old.get('task')!r}, not {task!r}; "
                 "set OUT to another directory.")
    meta["runs"] = old.get("runs") or [{k: v for k, v in old.items() if k != "task"}]
meta["runs"].append({"flagfile": flagfile, "variants": variants, "seeds": seeds, "steps": steps,
                     "wall_s": wall, "n": int(n), "base_ckpt": base, "extra_flags": extra,
                     "eval_flags": evalx, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                   time.gmtime())})
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(meta, f, indent=1)
    f.write("\n")
os.replace(tmp, path)
PYEOF
fi

failed=0
for v in $VARIANTS; do
  vflag="$(ablation_flags "$v")"
  for s in $SEEDS; do
    d="$OUT/$v/seed$s"
    if [[ "$DRY_RUN" != 1 ]]; then mkdir -p "$d"; fi
    train=("$PY" experiments/run.py "--flagfile=$FLAGFILE" "--tasks=$TASK" "--seed=$s")
    if [[ -n "$MLEBENCH_DIR" ]]; then train+=("--mlebench_dir=$MLEBENCH_DIR"); fi
    if [[ -n "$BASE_CKPT" ]]; then train+=("--policy_dir=$BASE_CKPT"); fi
    if [[ -n "$STEPS" ]]; then train+=("--max_steps=$STEPS"); fi
    if [[ -n "$WALL" ]]; then train+=("--max_wall_s=$WALL"); fi
    train+=("${extra[@]}")
    if [[ -n "$vflag" ]]; then train+=("$vflag"); fi
    train+=("--workdir=$d/run")
    if [[ -e "$d/run/summary.json" && "${FORCE:-0}" != 1 ]]; then
      echo "[ablations] $v, seed $s: trained already ($d/run/summary.json)"
    elif echo "[ablations] $v, seed $s: training"; ! run "$d/train.log" "${train[@]}"; then
      echo "[ablations] $v seed $s: training FAILED; see $d/train.log"; failed=1; continue
    fi
    ev=("$PY" experiments/evaluate.py "--seed=$s" ${undefok:+"--undefok=$undefok"}
        "${extra[@]}" "${evalx[@]}")
    if [[ -n "$MLEBENCH_DIR" ]]; then ev+=("--mlebench_dir=$MLEBENCH_DIR"); fi
    ev+=("--policy_dir=$d/run/policy" "--tasks=$TASK" "--n=$N" "--out=$d/eval")
    if [[ -e "$d/eval.json" && "${FORCE:-0}" != 1 ]]; then
      echo "[ablations] $v, seed $s: evaluated already ($d/eval.json)"
    elif echo "[ablations] $v, seed $s: best-of-$N evaluation"; ! run "$d/eval.log" "${ev[@]}"; then
      echo "[ablations] $v seed $s: evaluation FAILED; see $d/eval.log"; failed=1
    fi
  done
done

if [[ "$DRY_RUN" == 1 ]]; then
  echo "[ablations] dry run: nothing was run; the table would be $OUT/ablations.md"
  exit 0
fi
"$PY" experiments/report.py ablations --out_dir="$OUT" --out="$OUT/ablations.md" > /dev/null
echo "[ablations] table: $OUT/ablations.md"
exit "$failed"
