#!/usr/bin/env bash
# The first run on a machine with GPUs or TPUs, one command: prints the devices, then runs
# (each step's output in OUT/<step>.log, one failing step does not stop the others)
#   1. parity   tests/test_hf_parity.py, the real-0.5B-config test included (float32 at full
#               matmul precision: JAX_DEFAULT_MATMUL_PRECISION=highest; transformers on CUDA
#               where JAX runs on a GPU, else on the CPU)
#   2. sampling benchmarks/bench_sampling.py --device=accelerator (transformers on CUDA)
#   3. training benchmarks/bench_train.py --device=accelerator (torch on CUDA)
#   4. plan     experiments/plan.py --backend=native for the run below and for the paper's
#               run (Qwen2.5-3B, batch 128, 1024 + 1024 tokens), against the device memory
#   5. run      experiments/run.py: 2 PPO updates of a Qwen2.5-0.5B-shaped stand-in policy
#               (random weights, the real tokenizer size: mle_rl/io/standin.py) in bfloat16
#               on a (data, model) mesh with FSDP
# and writes one Markdown table, REPORT. Where JAX sees no GPU or TPU it says so and exits 0.
# `--dry-run` (or DRY_RUN=1) prints the steps only.
#
# Settings (environment variables; defaults in brackets):
#   OUT           logs, the stand-in policy and the run           [runs/accelerator_check]
#   REPORT        the Markdown table                             [OUT/accelerator_check.md]
#   MODEL         preset of the stand-in policy and the benchmarks          [qwen2p5_0p5b]
#   POLICY_DIR    use this HF directory instead of building the stand-in
#   MESH          data,model mesh of the run     [devices/2,2 with an even count, else N,1]
#   PLAN_MODEL    preset of the paper-settings plan                           [qwen2p5_3b]
#   STEP_TIMEOUT  seconds per step at most                                           [300]
#   TOTAL_S       seconds for all the steps together (one GPU's 10-minute slot): each step
#                 gets at most what is left; a step with no time left is skipped      [570]
#   STEPS         which steps, comma-separated          [parity,sampling,training,plan,run]
#   FORCE_CPU=1   run the steps on CPU anyway (to test this script; tests/test_launch_scripts.py)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

parse_dry_run "$@"
OUT="${OUT:-runs/accelerator_check}"
REPORT="${REPORT:-$OUT/accelerator_check.md}"
MODEL="${MODEL:-qwen2p5_0p5b}"
POLICY_DIR="${POLICY_DIR:-}"
STEP_TIMEOUT="${STEP_TIMEOUT:-300}"
TOTAL_S="${TOTAL_S:-570}"
STEPS="${STEPS:-parity,sampling,training,plan,run}"
FORCE_CPU="${FORCE_CPU:-0}"
PLAN_MODEL="${PLAN_MODEL:-qwen2p5_3b}"

# ------------------------------------------------------------------------ the devices
if ! info=$("$PY" - <<'PY' 2>&1
import jax
devs = jax.devices()
mem = (devs[0].memory_stats() or {}).get("bytes_limit")
print(devs[0].platform, len(devs), devs[0].device_kind.replace(" ", "_"),
      mem if mem else 0, jax.__version__)
PY
); then
  echo "error: JAX does not start here: ${info##*$'\n'}" >&2
  exit 1
fi
read -r platform ndev kind mem jaxv <<< "${info##*$'\n'}"
echo "[accelerator_check] jax $jaxv: $ndev $platform device(s) ($kind$( (( mem > 0 )) &&
  echo ", $(( mem >> 30 )) GiB usable each"))"
if [[ "$platform" == cpu && "$FORCE_CPU" != 1 ]]; then
  echo "[accelerator_check] no GPU or TPU here: JAX sees only CPU devices, so there is nothing" \
       "to check. On a machine with accelerators install jax[cuda12] or jax[tpu] (BUILD.md)" \
       "and run this again."
  exit 0
fi

if [[ -z "${MESH:-}" ]]; then
  if (( ndev >= 2 && ndev % 2 == 0 )); then MESH="$(( ndev / 2 )),2"; else MESH="$ndev,1"; fi
fi
STANDIN="${POLICY_DIR:-$OUT/standin_${MODEL}_bfloat16}"
RUN_FLAGS=(--policy_dir="$STANDIN" --dtype=bfloat16 --mesh_shape="$MESH" --fsdp --remat
           --max_steps=2 --batch_size=4 --sample_batch=4 --max_in_flight=4 --num_actors=2
           --max_prompt_tokens=1024 --max_new_tokens=256 --warm_pool=false
           --tensorboard=false --checkpoint_every=2 --keep_checkpoints=1 --instrument=ast
           --tasks=tabular-synth --workdir="$OUT/run")
PAPER_PLAN=(--model_preset="$PLAN_MODEL" --dtype=bfloat16 --fsdp --remat --batch_size=128
            --minibatches=$(( 128 / ndev > 0 ? 128 / ndev : 1 )) --max_prompt_tokens=1024
            --max_new_tokens=1024 --sample_batch=64)
# tests/conftest.py keeps JAX on the CPU unless JAX_PLATFORMS is set: the parity step
# names this machine's platform, and runs transformers on CUDA beside a GPU
TORCH_DEV=cpu; JAXP="$platform"; [[ "$platform" == gpu ]] && { TORCH_DEV=cuda; JAXP=cuda; }
PARITY_ENV="env JAX_PLATFORMS=$JAXP JAX_DEFAULT_MATMUL_PRECISION=highest MLE_RL_PARITY_TORCH_DEVICE=$TORCH_DEV"
declare -A CMD
CMD[parity]="$PARITY_ENV $PY -c 'import jax; print(\"parity: JAX on\", jax.devices()[0].device_kind)' && $PARITY_ENV $PY -m pytest -q -p no:cacheprovider -m 'slow or not slow' tests/test_hf_parity.py"
CMD[sampling]="$PY benchmarks/bench_sampling.py --device=accelerator --preset=$MODEL --batch 16 --new-tokens 256 --repeats 3"
CMD[training]="$PY benchmarks/bench_train.py --device=accelerator --preset=$MODEL --batch 8 --seq 512 --steps 3"
# both plans run; the step fails when either does
CMD[plan]="$PY experiments/plan.py --backend=native ${RUN_FLAGS[*]}; r=\$?; $PY experiments/plan.py --backend=native ${PAPER_PLAN[*]} || r=\$?; exit \$r"
CMD[run]="$PY experiments/run.py ${RUN_FLAGS[*]}"
IFS=',' read -r -a steps <<< "$STEPS"
for s in "${steps[@]}"; do
  [[ -n "${CMD[$s]:-}" ]] || { echo "error: unknown step '$s' in STEPS" >&2; exit 2; }
done

if [[ "$DRY_RUN" == 1 ]]; then
  [[ -n "$POLICY_DIR" ]] || echo "[accelerator_check] would build $STANDIN (python -m mle_rl.io.standin)"
  for s in "${steps[@]}"; do echo "[accelerator_check] $s: ${CMD[$s]}"; done
  echo "[accelerator_check] dry run: nothing was run; the table would be $REPORT"
  exit 0
fi

# ------------------------------------------------------------------------ the steps
mkdir -p "$OUT"
if [[ -z "$POLICY_DIR" && ! -f "$STANDIN/config.json" ]] && [[ ",$STEPS," == *,run,* ]]; then
  echo "[accelerator_check] building the stand-in policy $STANDIN (first time: trains the tokenizer)"
  "$PY" -m mle_rl.io.standin "$STANDIN" "$MODEL" bfloat16 > "$OUT/standin.log" 2>&1 ||
    echo "[accelerator_check] building the stand-in FAILED (see $OUT/standin.log)" >&2
fi
declare -A RC SECS
start=$SECONDS
for s in "${steps[@]}"; do
  left=$(( TOTAL_S - (SECONDS - start) ))
  budget=$(( left < STEP_TIMEOUT ? left : STEP_TIMEOUT ))
  t0=$SECONDS
  if (( budget <= 5 )); then
    echo "[accelerator_check] $s: skipped (TOTAL_S=$TOTAL_S spent)" | tee "$OUT/$s.log"
    RC[$s]=124; SECS[$s]=0; continue
  fi
  echo "[accelerator_check] $s (at most ${budget} s): ${CMD[$s]}"
  set +e
  timeout -k 20 "$budget" bash -c "${CMD[$s]}" > "$OUT/$s.log" 2>&1
  RC[$s]=$?
  set -e
  SECS[$s]=$(( SECONDS - t0 ))
  echo "[accelerator_check] $s: exit ${RC[$s]} after ${SECS[$s]} s ($OUT/$s.log)"
done

# ------------------------------------------------------------------------ the table
figure() {   # the figure of one step's log, on one line
  local log="$OUT/$1.log"
  case "$1" in
    parity) tail -n 1 "$log" ;;
    sampling) grep -h "^ratio (sample" "$log" | head -n 1 ;;
    training) { grep -h "^ours (jax)" "$log"; grep -h "^ratio (tokens" "$log"; } | tr -s ' ' | paste -sd ';' ;;
    plan) "$PY" - "$log" <<'PY'
import json, sys
out = []
for line in open(sys.argv[1]):
    if line.startswith("{"):
        p = json.loads(line)
        b = p["per_device_bytes"]
        lim = p.get("device_bytes_limit") or 0
        out.append(f"{p['model']} x{p['devices']}: {b['total'] / 2**30:.1f} GiB per device of "
                   f"{lim / 2**30:.1f} (fits: {p['fits'].get('this_device')})")
print("; ".join(out) or "no plan printed")
PY
    ;;
    run) "$PY" - "$log" "$OUT/run/metrics.jsonl" "$OUT/plan.log" <<'PY'
import json, sys
log, metrics, plan = sys.argv[1:]
done = [l.strip() for l in open(log) if l.startswith("done:")]
out = [done[-1] if done else "no 'done:' line"]
try:     # the device allocator's high-water mark (runtime/footprint.py) against the plan
    peak = max(json.loads(l).get("mem/device_peak_mb", 0) for l in open(metrics))
except (OSError, ValueError):
    peak = 0
try:     # the first plan printed is this run's (the second is the paper's settings)
    first = next(json.loads(l) for l in open(plan) if l.startswith("{"))
    planned = first["per_device_bytes"]["total"] / 2**20
except (OSError, StopIteration, KeyError, ValueError):
    planned = 0
if peak:
    out.append(f"device peak {peak / 1024:.2f} GiB" + (
        f", plan {planned / 1024:.2f} GiB (measured / plan {peak / planned:.2f})" if planned else ""))
print("; ".join(out))
PY
    ;;
  esac
}
{
  echo "# Accelerator check: $ndev x $kind ($platform), jax $jaxv, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "| step | status | figure | seconds | log |"
  echo "|---|---|---|---|---|"
  for s in "${steps[@]}"; do
    status=ok; [[ "${RC[$s]}" == 0 ]] || status="FAILED (exit ${RC[$s]})"
    echo "| $s | $status | $(figure "$s" 2>/dev/null | tr '|' '/') | ${SECS[$s]} | $OUT/$s.log |"
  done
} > "$REPORT"
cat "$REPORT"
echo "[accelerator_check] wrote $REPORT"
