#!/usr/bin/env bash
# Does RL beat sampling and searching with the SFT policy, at every k and at equal compute?
# Per task and seed: best@k curve of the SFT policy (N i.i.d. solve samples), an RL run
# with the default flagfile, the RL policy's best@k curve (N samples, same seed), and an
# AIDE-style greedy search with the SFT policy at the RL run's compute (E + N programs, E =
# the programs the RL run executed); per task, one more pool of SFT samples so that the SFT
# policy's best@(E + N) is measured from E + N draws. Then the report: best@k tables and
# figures (mean ± std over seeds), equal-compute baselines, training curves with a band over
# seeds. Restarted, it skips what is on disk (FORCE=1 redoes). `--dry-run`: the plan only.
#
# Settings (environment variables; defaults in brackets):
#   TASKS      comma-separated task ids          [the four held-out tasks of warm_start.md]
#   SEEDS      seeds                                                           [0 1 2]
#   N          samples per best@k curve (k = 1, 2, 4, ..., N)                    [128]
#   FLAGFILE   the RL runs' settings                     [experiments/tabular.flags]
#   STEPS      --max_steps of each RL run                            [the flagfile's]
#   WALL       --max_wall_s of each RL run                           [the flagfile's]
#   GREEDY=0   skip the greedy search;  POOL=0  skip the extra SFT pool
#   POLICY     the SFT policy                                              [default]
#   OUT        OUT/<task>/seed<k>/{sft,rl_eval,greedy}.{json,md,log}, OUT/<task>/seed<k>/rl/,
#              OUT/<task>/sft_pool.json (+ sft_pool_<seed>.json top-ups)   [runs/rl_gain]
#   TASK_DIR   where the held-out tasks are written                [OUT/heldout_tasks]
#   REPORT     the markdown report               [experiments/results/rl_gain.md]
#   EXTRA_FLAGS  more flags for run.py (e.g. a setting under test)
#   EVAL_FLAGS   more flags for evaluate.py [--sample_batch=16: rounds of 16 programs, and
#                --temperature= the RL runs' own (FLAGFILE's, or EXTRA_FLAGS' when it sets one):
#                SFT and RL are both sampled as RL trained. evaluate.py's own default is 0.7;
#                rl_gain_build5_klloss_t1.md shows how far apart the two can be]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cpu_only
parse_dry_run "$@"
HELDOUT="heldout-pima-diabetes,heldout-glass-type,heldout-school-scores,heldout-cpu-performance"
TASKS="${TASKS:-$HELDOUT}"
SEEDS="${SEEDS:-0 1 2}"
N="${N:-128}"
FLAGFILE="${FLAGFILE:-experiments/tabular.flags}"
STEPS="${STEPS:-}"
WALL="${WALL:-}"
GREEDY="${GREEDY:-1}"
POOL="${POOL:-1}"
POLICY="${POLICY:-default}"
OUT="${OUT:-runs/rl_gain}"
TASK_DIR="${TASK_DIR:-$OUT/heldout_tasks}"
REPORT="${REPORT:-experiments/results/rl_gain.md}"
FORCE="${FORCE:-0}"
read -r -a extra <<< "${EXTRA_FLAGS:-}"
train_temperature() {   # the last --temperature= of the flagfile, then of EXTRA_FLAGS
  local t=1.0 f          # neither sets one: run.py's default (mle_rl/config.py), 1.0
  if [[ -f "$FLAGFILE" ]]; then
    f=$(sed -n 's/^--temperature=\([^ ]*\).*/\1/p' "$FLAGFILE" | tail -1)
    [[ -n "$f" ]] && t="$f"
  fi
  for f in "${extra[@]}"; do [[ "$f" == --temperature=* ]] && t="${f#--temperature=}"; done
  echo "$t"
}
read -r -a evalx <<< "${EVAL_FLAGS:---sample_batch=16 --temperature=$(train_temperature)}"
IFS=',' read -r -a tasks <<< "$TASKS"
budget=()
[[ -n "$STEPS" ]] && budget+=("--max_steps=$STEPS")
[[ -n "$WALL" ]] && budget+=("--max_wall_s=$WALL")

run() {   # run LOG CMD...: print the command; run it (unless a dry run), its output into LOG
  local log="$1"; shift
  printf '+'; printf ' %q' "$@"; printf '\n'
  if [[ "$DRY_RUN" == 1 ]]; then return 0; fi
  mkdir -p "$(dirname "$log")"
  "$@" > "$log" 2>&1 || { echo "[rl_gain] failed, see $log" >&2; tail -5 "$log" >&2; return 1; }
}

once() {   # once OUTPUT LOG CMD...: run unless OUTPUT exists
  local out="$1"; shift
  if [[ -e "$out" && "$FORCE" != 1 ]]; then echo "[rl_gain] done already: $out"; return 0; fi
  run "$@"
}

evaluate() {   # evaluate POLICY TASK SEED PREFIX N [flags...]
  local policy="$1" task="$2" seed="$3" prefix="$4" n="$5"; shift 5
  once "$prefix.json" "$prefix.log" "$PY" experiments/evaluate.py "--policy_dir=$policy" \
    "--tasks=$task" "--seed=$seed" "--n=$n" "--task_dir=$TASK_DIR" "--out=$prefix" \
    "${evalx[@]}" "$@"
}

executed() {   # programs an RL run executed (its summary.json; 0 in a dry run without one)
  if [[ "$DRY_RUN" == 1 && ! -f "$1" ]]; then echo 0; return; fi
  "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["actions_done"])' "$1"
}

pooled() {   # pooled DIR: the solve samples in DIR/sft_pool*.json, and how many files
  "$PY" - "$1" <<'PY'
import json, pathlib, sys
files = sorted(pathlib.Path(sys.argv[1]).glob("sft_pool*.json"))
n = sum(m == "solve" for f in files for ev in json.loads(f.read_text()).values()
        for m in ev.get("modes", []))
print(n, len(files))
PY
}

baselines=""
[[ "$GREEDY" == 1 ]] && baselines+=", greedy search at equal compute"
[[ "$POOL" == 1 ]] && baselines+=", SFT pool for best@(E+N)"
echo "[rl_gain] plan: ${#tasks[@]} task(s) x seeds ($SEEDS): SFT best@k (N=$N), RL" \
     "($FLAGFILE ${budget[*]} ${extra[*]}), RL best@k$baselines;" \
     "runs in $OUT, report $REPORT"
if [[ "$DRY_RUN" != 1 ]]; then
  mkdir -p "$OUT"
  printf '{"tasks": "%s", "seeds": "%s", "N": %s, "flagfile": "%s", "budget": "%s", "extra": "%s", "machine": "%s CPU cores, %s"}\n' \
    "$TASKS" "$SEEDS" "$N" "$FLAGFILE" "${budget[*]}" "${extra[*]}" "$(nproc)" "$(uname -sm)" \
    > "$OUT/rl_gain.json"
fi
once "$TASK_DIR/heldout-cpu-performance/task.json" "$OUT/heldout.log" \
  "$PY" -m mle_rl.env.procedural.heldout "$TASK_DIR"
for t in "${tasks[@]}"; do
  most=0
  for s in $SEEDS; do
    d="$OUT/$t/seed$s"
    echo "[rl_gain] $t seed $s"
    evaluate "$POLICY" "$t" "$s" "$d/sft" "$N" --noimprove
    once "$d/rl/summary.json" "$d/rl.log" "$PY" experiments/run.py "--flagfile=$FLAGFILE" \
      "--tasks=$t" "--seed=$s" "--policy_dir=$POLICY" "--task_dir=$TASK_DIR" "${budget[@]}" \
      "${extra[@]}" "--workdir=$d/rl"
    evaluate "$d/rl/policy" "$t" "$s" "$d/rl_eval" "$N" --noimprove
    e=$(executed "$d/rl/summary.json")
    (( e > most )) && most=$e
    if [[ "$GREEDY" == 1 && "$DRY_RUN" != 1 ]]; then
      evaluate "$POLICY" "$t" "$s" "$d/greedy" "$((e + N))" --search=greedy
    elif [[ "$GREEDY" == 1 ]]; then
      echo "+ (greedy search of E + $N programs with the SFT policy, E from the RL run)"
    fi
  done
  # SFT samples beyond the seeds' own, so that best@(E + N) has E + N draws for every seed:
  # the pool (seed 1000), then, when seeds run later need more, a top-up with the next seed.
  n_seeds=$(wc -w <<< "$SEEDS")
  read -r have parts <<< "$(pooled "$OUT/$t")"
  more=$(( most + N - n_seeds * N - have ))
  if [[ "$POOL" == 1 && "$more" -gt 0 ]]; then
    prefix="$OUT/$t/sft_pool"
    (( parts > 0 )) && prefix+="_$((1000 + parts))"
    evaluate "$POLICY" "$t" "$((1000 + parts))" "$prefix" "$more" --noimprove
  fi
done
run "$OUT/report.log" "$PY" experiments/rl_gain_report.py "--out_dir=$OUT" "--out=$REPORT"
[[ "$DRY_RUN" == 1 ]] || { cat "$OUT/report.log"; echo "[rl_gain] report: $REPORT"; }
