"""The memory-plan table of BUILD.md: `experiments/plan.py` over models x device counts.

    python benchmarks/plan_table.py --out=runs/plan_table          # the BUILD.md grid
    python benchmarks/plan_table.py --models=qwen2p5_0p5b --devices=8 --full
    python benchmarks/plan_table.py --state-only          # parameters + optimizer only

Each cell is one `plan.py` subprocess (its own fake CPU devices) at the paper's settings
(batch 128, 1024 + 1024 tokens, policy + separate critic + reference, bfloat16,
--sample_batch=64) with FSDP over all devices, gradient checkpointing (--remat) and as many
minibatches as make one sequence per device per optimizer step. By default each cell is
compiled at 2 and 4 layers and extrapolated to the model's depth (`--extrapolate_layers`;
`--full` compiles every layer, which takes 15+ minutes per cell on 2 busy cores;
`--state-only` compiles nothing: the state's exact bytes, a lower bound of the total). Results
are kept in --out (one JSON per cell, reused when present); the table is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
GIB = 1 << 30
ACCEL_ORDER = ("TPU-v5e-16GB", "A100-40GB", "A100-80GB", "TPU-v5p-95GB", "H200-141GB")


def cell_flags(model: str, devices: int, batch: int, extra: list) -> list:
    minibatches = max(1, batch // devices)
    return [f"--model_preset={model}", f"--devices={devices}", "--fsdp", "--remat",
            "--dtype=bfloat16", f"--batch_size={batch}", f"--minibatches={minibatches}",
            "--max_prompt_tokens=1024", "--max_new_tokens=1024", "--sample_batch=64", *extra]


def run_cell(flags: list, out: pathlib.Path, log) -> dict:
    if out.is_file():
        return json.loads(out.read_text())
    cmd = [sys.executable, str(ROOT / "experiments" / "plan.py"), *flags]
    log(f"[table] {' '.join(cmd[1:])}")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        result = {"error": " | ".join(tail), "flags": flags}
    else:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        result["wall_s"] = round(time.monotonic() - t0, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result))
    return result


def gib(x) -> str:
    return f"{x / GIB:.1f}"


def table(rows: list) -> str:
    lines = ["| model | devices | minibatches | params / device | optimizer / device | "
             "update peak | sampler peak | total / device | fits (at 90% of HBM) | how |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['devices']} | | | | | | | not planned: "
                         f"{r['error'][:80]} | |")
            continue
        b = r["per_device_bytes"]
        fits = [a.replace("A100-80GB", "A100/H100-80GB") for a in ACCEL_ORDER
                if r["fits"].get(a)]
        how = {"compiled": "compiled"}.get(r["method"], (
            "state only" if r["method"].startswith("state only") else "2+4 layers, extrapolated"))
        lines.append(
            f"| {r['model']} | {r['devices']} | {r['minibatches']} | {gib(b['params'])} | "
            f"{gib(b['optimizer'])} | {gib(b['update']['peak']) if b.get('update') else '-'} | "
            f"{gib(b['sampler']['peak']) if b.get('sampler') else '-'} | {gib(b['total'])} | "
            f"{', '.join(fits) or 'none'} | {how} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen2p5_0p5b,qwen2p5_1p5b,qwen2p5_3b,qwen2p5_7b")
    ap.add_argument("--devices", default="1,8,16,64")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--full", action="store_true", help="compile every layer (slow)")
    ap.add_argument("--state-only", action="store_true",
                    help="no compile: the train state's exact bytes per device only "
                         "(plan.py --nocompile; seconds per cell)")
    ap.add_argument("--out", default="runs/plan_table")
    ap.add_argument("extra", nargs="*", help="more plan.py flags (after --)")
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out)
    rows = []
    for model in args.models.split(","):
        for n in (int(x) for x in args.devices.split(",")):
            mode = ("--nocompile" if args.state_only else
                    None if args.full else "--extrapolate_layers=2,4")
            extra = list(args.extra) + ([mode] if mode else [])
            flags = cell_flags(model, n, args.batch, extra)
            suffix = "_state" if args.state_only else "_full" if args.full else ""
            name = f"{model}_{n}{suffix}.json"
            r = run_cell(flags, out / name, lambda m: print(m, flush=True))
            r.setdefault("model", model)
            r.setdefault("devices", n)
            rows.append(r)
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
