"""Sampling throughput: `mle_rl.sampling.generate` vs Google Tunix 0.1.7's `Sampler`, same weights.

Tunix runs in a venv of its own (created on first use, default
~/.cache/mle_rl/venvs/tunix-0.1.7, or --tunix-venv / $MLE_RL_TUNIX_VENV):
`python -m venv`, then `pip install google-tunix==0.1.7` with jax, jaxlib and flax pinned to
the versions in constraints.txt. Nothing of Tunix enters the project's venv.

For each model (default: `tiny` and a Qwen2.5-0.5B shape with 4 layers, random init,
float32) our side writes ONE HF checkpoint with `hf.save` and loads it back with `hf.load`;
the Tunix side (`tunix_side.py`, in the Tunix venv) loads the same files into Tunix's Qwen2.
Each side is its own process, kept warm; the calls are interleaved (ours, Tunix, ours,
Tunix, ... for --repeats rounds) after one first call per side and mode (reported apart:
compilation). Both sides must produce exactly --new-tokens tokens per row (no EOS on
either side) or the script fails. Modes: temperature 1 with no top-k / top-p, and greedy
(whose tokens are compared). Generated tokens/s = batch * new tokens / median seconds of
one whole sampler call (prefill included). Ratio = ours / Tunix.

    python benchmarks/bench_tunix.py                 # batch 16 x 32-token prompts, 512 new
    python benchmarks/bench_tunix.py --quick         # batch 4, 64 new tokens, 2 rounds
    python benchmarks/bench_tunix.py --setup-only    # just create the Tunix venv
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import common
import peer_worker

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
TUNIX_VERSION = "0.1.7"
ENV_VENV = "MLE_RL_TUNIX_VENV"
DEFAULT_VENV = pathlib.Path("~/.cache/mle_rl/venvs").expanduser() / f"tunix-{TUNIX_VERSION}"
PINNED = ("jax", "jaxlib", "flax")   # pinned in the Tunix venv to our constraints.txt
MODES = {"sample": 1.0, "greedy": 0.0}
MARKER = ".mle_rl_tunix_ok"          # written last: the venv is complete
INSTALLING = ".mle_rl_tunix_installing"


class SetupError(Exception):
    """The Tunix venv cannot be created or used; the message is one line."""


class SideError(RuntimeError):
    """A side failed or broke the benchmark's rules (wrong number of tokens)."""


# ----------------------------------------------------------------------- arguments
@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A model preset of `mle_rl.models.config`, optionally with fewer layers."""
    preset: str
    layers: int | None = None

    @property
    def label(self) -> str:
        return self.preset if self.layers is None else f"{self.preset}:{self.layers}"


def parse_model_spec(text: str) -> ModelSpec:
    """'tiny' or 'qwen2p5_0p5b:4' (preset name, then optionally ':' and a layer count)."""
    from mle_rl.models import config
    name, _, layers = text.strip().partition(":")
    if name not in config.PRESETS:
        raise ValueError(f"unknown model preset {name!r} in {text!r}; known: "
                         f"{', '.join(config.PRESETS)}.")
    if layers and (not layers.isdigit() or int(layers) < 1):
        raise ValueError(f"{text!r}: the layer count after ':' must be a positive integer.")
    return ModelSpec(name, int(layers) if layers else None)


def model_config(spec: ModelSpec):
    from mle_rl.models import config
    cfg = config.preset(spec.preset)
    return cfg if spec.layers is None else dataclasses.replace(cfg, num_layers=spec.layers)


def default_venv() -> pathlib.Path:
    return pathlib.Path(os.environ.get(ENV_VENV) or DEFAULT_VENV).expanduser()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny,qwen2p5_0p5b:4",
                    help="comma-separated presets of mle_rl.models.config, NAME[:LAYERS]")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds (each: ours, Tunix)")
    ap.add_argument("--modes", default="sample,greedy",
                    help="comma-separated: sample (temperature 1), greedy")
    ap.add_argument("--quick", action="store_true", help="batch 4, 64 new tokens, 2 rounds")
    ap.add_argument("--cores", type=int, default=None,
                    help="pin both sides to the first N cores; default: all")
    ap.add_argument("--malloc", choices=("tcmalloc", "system"), default="tcmalloc",
                    help="allocator of both sides (tcmalloc when installed)")
    ap.add_argument("--seed", type=int, default=0, help="prompts and sampling seed")
    ap.add_argument("--tunix-venv", type=pathlib.Path, default=None,
                    help=f"Tunix's venv (created when missing); default ${ENV_VENV} or "
                         f"{DEFAULT_VENV}")
    ap.add_argument("--setup-only", action="store_true", help="create the Tunix venv and exit")
    ap.add_argument("--windows", choices=("one", "fine", "double", "two"), default=None,
                    help="our decode phases (sampling.DECODE_WINDOWS; default: the library's)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # our side
    ap.add_argument("--ckpt", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    common.sampling_shape_args(ap, args)
    try:
        args.models = [parse_model_spec(m) for m in args.models.split(",") if m.strip()]
    except ValueError as e:
        ap.error(str(e))
    if not args.models:
        ap.error("--models is empty.")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.modes if m not in MODES]
    if bad or not args.modes:
        ap.error(f"--modes: expected some of {', '.join(MODES)}, got {bad or 'nothing'}.")
    args.tunix_venv = (args.tunix_venv or default_venv()).expanduser()
    return args


# ----------------------------------------------------------------------- the Tunix venv
def pinned_versions(constraints: pathlib.Path = ROOT / "constraints.txt") -> dict:
    """{name: version} of PINNED in our constraints.txt (what our venv was tested with)."""
    found = {}
    for line in constraints.read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and name.lower() in PINNED:
            found[name.lower()] = version.strip()
    return found


def install_spec(pins: dict) -> list:
    return [f"google-tunix=={TUNIX_VERSION}"] + [f"{n}=={pins[n]}" for n in PINNED if n in pins]


def _why(log: pathlib.Path) -> str:
    """The most telling line of a failed pip log."""
    lines = [l.strip() for l in log.read_text(errors="replace").splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("ERROR:")]
    return (errors or lines or ["no output"])[0 if errors else -1][:300]


def _run_logged(cmd, log: pathlib.Path, title: str) -> int:
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(map(str, cmd))}   # {title}\n")
        f.flush()
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL).returncode


_CHECK = ("import json, sys, jax, jaxlib, flax, tunix, tunix.generate.sampler, "
          "tunix.models.qwen2.params; print(json.dumps({'tunix': tunix.__version__, "
          "'jax': jax.__version__, 'jaxlib': jaxlib.__version__, 'flax': flax.__version__}))")


def ensure_tunix_venv(venv: pathlib.Path, pins: dict) -> tuple:
    """The python of a venv with google-tunix==TUNIX_VERSION, creating the venv when
    needed. Returns (python path, seconds spent creating it or None when it was reused,
    versions). Raises SetupError (one line) when it cannot be made."""
    venv = venv.expanduser().resolve()
    python = venv / "bin" / "python"
    spec = install_spec(pins)
    log = venv.parent / f"{venv.name}.install.log"
    created = None
    if not ((venv / MARKER).exists() and (venv / MARKER).read_text().split() == spec):
        if venv.exists() and not (venv / "pyvenv.cfg").exists():
            raise SetupError(f"{venv} exists and is not a venv; remove it or pass another "
                             f"--tunix-venv.")
        if (venv / INSTALLING).exists():   # an earlier attempt of ours did not finish
            shutil.rmtree(venv)
        t0 = time.perf_counter()
        venv.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"# Tunix venv for benchmarks/bench_tunix.py, {time.ctime()}\n")
        print(f"creating the Tunix venv {venv} (pip install {' '.join(spec)}; log: {log}) ...",
              flush=True)
        if not venv.exists():
            if _run_logged([sys.executable, "-m", "venv", str(venv)], log, "venv") != 0:
                raise SetupError(f"cannot create the Tunix venv at {venv}: python -m venv "
                                 f"failed ({_why(log)}). Full log: {log}")
            (venv / INSTALLING).write_text("")
        pip = [str(python), "-m", "pip", "install", "--progress-bar", "off", "--timeout", "60",
               "--retries", "3", *spec]
        if _run_logged(pip, log, "install") != 0:
            raise SetupError(f"cannot create the Tunix venv at {venv}: pip install "
                             f"{' '.join(spec)} failed ({_why(log)}); it needs PyPI (or pass "
                             f"--tunix-venv / ${ENV_VENV} = a venv with google-tunix=="
                             f"{TUNIX_VERSION}). Full log: {log}")
        created = time.perf_counter() - t0
    check = subprocess.run([str(python), "-c", _CHECK], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
    if check.returncode != 0:
        last = (check.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise SetupError(f"the Tunix venv {venv} does not import tunix's sampler ({last}); "
                         f"remove it to have it created again.")
    versions = json.loads(check.stdout.strip().splitlines()[-1])
    if versions["tunix"] != TUNIX_VERSION:
        raise SetupError(f"the Tunix venv {venv} has tunix {versions['tunix']}, not "
                         f"{TUNIX_VERSION}; remove it to have it created again.")
    (venv / MARKER).write_text(" ".join(spec) + "\n")
    (venv / INSTALLING).unlink(missing_ok=True)
    return python, created, versions


# ----------------------------------------------------------------------- the two sides
class Side:
    """A side's process: JSON commands on its stdin, JSON answers on its stdout, its
    stderr in a log file."""

    def __init__(self, name: str, argv: list, env: dict, log: pathlib.Path):
        self.name, self.log_path = name, log
        self._log = open(log, "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, text=True, env=env, bufsize=1)
        self.info = self._answer("starting")["info"]

    def _answer(self, what: str) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise SideError(f"{self.name} side exited (code {code}) while {what}; the end of "
                            f"its log {self.log_path}:\n{self.log_tail()}")
        reply = json.loads(line)
        if "error" in reply:
            raise SideError(f"{self.name} side failed while {what}: {reply['error']} "
                            f"(log: {self.log_path}):\n{self.log_tail()}")
        return reply

    def log_tail(self, n: int = 15) -> str:
        self._log.flush()
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join("    " + l for l in lines[-n:])

    def run(self, prompts, new_tokens: int, temperature: float, seed: int,
            return_tokens: bool = False) -> dict:
        self.proc.stdin.write(json.dumps({
            "cmd": "run", "prompts": prompts, "new_tokens": new_tokens,
            "temperature": temperature, "seed": seed, "return_tokens": return_tokens}) + "\n")
        self.proc.stdin.flush()
        reply = self._answer(f"sampling (T={temperature})")
        check_lengths(self.name, reply["lengths"], len(prompts), new_tokens)
        return reply

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def check_lengths(side: str, lengths, batch: int, new_tokens: int) -> None:
    """Every row must have exactly `new_tokens` generated tokens."""
    if len(lengths) != batch or any(n != new_tokens for n in lengths):
        raise SideError(f"{side} side: expected {batch} rows of exactly {new_tokens} new "
                        f"tokens, got lengths {lengths}.")


def child_env(malloc: str) -> dict:
    """The environment of both sides: CPU only, no persistent compilation cache (first calls
    must compile), the same allocator."""
    from mle_rl.runtime import allocator
    env = dict(os.environ)
    for k in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
              "PYTHONPATH", "VIRTUAL_ENV"):
        env.pop(k, None)
    env["JAX_PLATFORMS"] = "cpu"
    env["TF_CPP_MIN_LOG_LEVEL"] = env.get("TF_CPP_MIN_LOG_LEVEL", "2")
    env[allocator._ENV_GUARD] = "1"          # our side: no re-exec, LD_PRELOAD decides
    path = allocator.find_tcmalloc() if malloc == "tcmalloc" else None
    if path:
        env["LD_PRELOAD"] = path + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        env.setdefault("TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD", str(1 << 40))
    return env


def ours_worker(args) -> int:
    """Our side (run with --worker): write the checkpoint, load it back, serve."""
    peer_worker.pin_cores(args.cores)
    proto = peer_worker.protocol_stdout()
    try:
        compile_log = peer_worker.CompileLog()
        import jax
        import jax.numpy as jnp
        import jaxlib
        from mle_rl import sampling
        from mle_rl.models import cpu_kernels, hf, qwen2
        from mle_rl.runtime import allocator

        if args.windows:
            sampling.DECODE_WINDOWS = args.windows
        spec = args.models[0]
        hf.save(qwen2.init_model(model_config(spec), seed=args.seed), args.ckpt)
        model = hf.load(args.ckpt, dtype=jnp.float32)

        def generate(prompts, new_tokens, temperature, seed):
            out = sampling.generate(model, prompts, max_new_tokens=new_tokens, rng=seed,
                                    temperature=temperature)
            return [row[:n] for row, n in zip(out.tokens, out.lengths)]

        kernels = sampling.cpu_decode_path().kernels and cpu_kernels.available()
        info = {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
                "devices": str(jax.devices()), "python": sys.version.split()[0],
                "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
                "allocator": allocator.loaded() or "glibc malloc",
                "decode": ("native C++ kernels" if kernels else "XLA")
                + f", decode phases {sampling.phase_windows(args.new_tokens, kernels)}",
                "params": model.config.num_params}
    except Exception as e:  # noqa: BLE001 - reported to the orchestrator
        peer_worker.fail_startup(proto, e)
        return 1
    peer_worker.serve(generate, info, proto, compile_log)
    return 0


# ----------------------------------------------------------------------- measuring
def make_prompts(batch: int, prompt_len: int, vocab: int, seed: int) -> list:
    """Random prompts over ids 1..vocab-1 (the same on both sides)."""
    rng = random.Random(seed)
    return [[rng.randrange(1, vocab) for _ in range(prompt_len)] for _ in range(batch)]


def greedy_agreement(ours, theirs) -> dict:
    """Position-wise agreement of two [B][N] token lists: the fraction of equal tokens, the
    rows equal throughout, and the median position of a row's first difference (N when
    equal)."""
    equal = total = same_rows = 0
    first = []
    for a, b in zip(ours, theirs):
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        equal += sum(x == y for x, y in zip(a, b))
        total += max(len(a), len(b))
        same_rows += not diff and len(a) == len(b)
        first.append(diff[0] if diff else min(len(a), len(b)))
    return {"token_match": equal / total if total else 1.0, "rows_equal": same_rows,
            "rows": len(first), "median_first_diff": statistics.median(first) if first else 0}


def compile_summary(compiles, min_s: float = 0.05) -> str:
    """'N XLA compilations, X s: name a.aa s, ...' (names of those >= min_s seconds)."""
    total = sum(s for _, s in compiles)
    big = sorted((c for c in compiles if c[1] >= min_s), key=lambda c: -c[1])
    named = ", ".join(f"{n} {s:.2f} s" for n, s in big)
    return f"{len(compiles)} XLA compilations, {total:.2f} s" + (f": {named}" if named else "")


@dataclasses.dataclass
class Row:
    model: str
    mode: str
    ours_tps: float
    tunix_tps: float
    ours_first_s: float
    tunix_first_s: float
    ours_cpu_s: float
    tunix_cpu_s: float
    agreement: dict | None = None

    @property
    def ratio(self) -> float:
        return self.ours_tps / self.tunix_tps

    @property
    def cpu_ratio(self) -> float:
        return self.tunix_cpu_s / self.ours_cpu_s


def format_table(rows) -> str:
    head = (f"{'model':<18}{'mode':<8}{'ours tok/s':>11}{'Tunix tok/s':>12}{'ratio':>8}"
            f"{'CPU-s ratio':>12}{'ours 1st s':>11}{'Tunix 1st s':>12}  greedy tokens equal")
    lines = [head]
    for r in rows:
        a = r.agreement
        agree = "-" if a is None else (
            f"{100 * a['token_match']:.1f}% ({a['rows_equal']}/{a['rows']} rows; "
            f"median first diff at {a['median_first_diff']:g})")
        lines.append(f"{r.model:<18}{r.mode:<8}{r.ours_tps:>11.0f}{r.tunix_tps:>12.0f}"
                     f"{r.ratio:>7.2f}x{r.cpu_ratio:>11.2f}x{r.ours_first_s:>11.2f}"
                     f"{r.tunix_first_s:>12.2f}  {agree}")
    return "\n".join(lines)


def load_report() -> str:
    one, five, fifteen = os.getloadavg()
    try:
        up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        up = ""
    return (f"{time.strftime('%H:%M:%S UTC', time.gmtime())} load average {one:.2f} {five:.2f} "
            f"{fifteen:.2f} on {os.cpu_count()} CPUs" + (f"  ({up})" if up else ""))


def bench_model(args, spec: ModelSpec, tunix_python, workdir: pathlib.Path, env) -> list:
    cfg = model_config(spec)
    ckpt = workdir / spec.label.replace(":", "_")
    prompts = make_prompts(args.batch, args.prompt_len, cfg.vocab_size, args.seed)
    common_argv = ["--cores", str(args.cores)] if args.cores else []
    print(f"\n== {spec.label}: {cfg.num_layers} layers, width {cfg.hidden_size}, heads "
          f"{cfg.num_heads}:{cfg.num_kv_heads}, vocab {cfg.vocab_size}, "
          f"{cfg.num_params / 1e6:.1f}M params, float32 ==", flush=True)
    sides = []
    try:
        t0 = time.perf_counter()
        ours = Side("ours", [sys.executable, str(HERE / "bench_tunix.py"), "--worker",
                             "--ckpt", str(ckpt), "--models", spec.label, "--seed",
                             str(args.seed), *common_argv,
                             *(["--windows", args.windows] if args.windows else [])],
                     env, workdir / "ours.log")
        sides.append(ours)
        print(f"  ours: checkpoint written and loaded in {time.perf_counter() - t0:.1f} s; "
              f"{ours.info}", flush=True)
        t0 = time.perf_counter()
        tunix = Side("Tunix", [str(tunix_python), str(HERE / "tunix_side.py"), "--ckpt",
                               str(ckpt), "--prompt-len", str(args.prompt_len),
                               "--new-tokens", str(args.new_tokens), *common_argv],
                     env, workdir / "tunix.log")
        sides.append(tunix)
        print(f"  Tunix: imported and loaded in {time.perf_counter() - t0:.1f} s; "
              f"{tunix.info}", flush=True)
        if tunix.info["params"] != ours.info["params"]:
            raise SideError(f"parameter counts differ: ours {ours.info['params']}, "
                            f"Tunix {tunix.info['params']}.")
        rows = [bench_mode(args, spec, mode, prompts, ours, tunix) for mode in args.modes]
    finally:
        for side in sides:
            side.close()
        shutil.rmtree(ckpt, ignore_errors=True)
    return rows


def bench_mode(args, spec, mode, prompts, ours, tunix) -> Row:
    temp = MODES[mode]
    greedy = temp == 0
    first = {}
    for side in (ours, tunix):
        r = side.run(prompts, args.new_tokens, temp, args.seed)
        first[side.name] = r["seconds"]
        print(f"  [{mode}] {side.name:<5} first call {r['seconds']:.2f} s "
              f"({compile_summary(r['compiles'])})", flush=True)
    wall = {ours.name: [], tunix.name: []}
    cpu = {ours.name: [], tunix.name: []}
    last = {}
    for i in range(args.repeats):
        for side in (ours, tunix):
            r = side.run(prompts, args.new_tokens, temp, args.seed,
                         return_tokens=greedy and i == args.repeats - 1)
            wall[side.name].append(r["seconds"])
            cpu[side.name].append(r["cpu_seconds"])
            last[side.name] = r
            extra = f"; {compile_summary(r['compiles'], 0)}" if r["compiles"] else ""
            print(f"  [{mode}] {side.name:<5} round {i + 1}/{args.repeats} {r['seconds']:.2f} s "
                  f"({r['cpu_seconds']:.2f} CPU s{extra})", flush=True)
    n = args.batch * args.new_tokens
    med = {k: statistics.median(v) for k, v in wall.items()}
    agreement = (greedy_agreement(last[ours.name]["tokens"], last[tunix.name]["tokens"])
                 if greedy else None)
    return Row(spec.label, mode, n / med[ours.name], n / med[tunix.name], first[ours.name],
               first[tunix.name], statistics.median(cpu[ours.name]),
               statistics.median(cpu[tunix.name]), agreement)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return ours_worker(args)
    print("== sampling benchmark: mle_rl.sampling.generate vs Tunix "
          f"{TUNIX_VERSION} Sampler ==", flush=True)
    print(f"load before: {load_report()}", flush=True)
    try:
        tunix_python, created, versions = ensure_tunix_venv(args.tunix_venv, pinned_versions())
    except SetupError as e:
        print(f"bench_tunix: {e}", file=sys.stderr)
        return 2
    print(f"Tunix venv: {args.tunix_venv} "
          + (f"created in {created:.0f} s" if created is not None else "reused")
          + f"; {versions}", flush=True)
    if args.setup_only:
        return 0
    print(f"batch {args.batch} x prompt {args.prompt_len} tokens, {args.new_tokens} new tokens "
          f"per row (no EOS), float32, JAX CPU, cores: {args.cores or 'all'}; per mode one "
          f"first call per side, then {args.repeats} interleaved rounds (ours, Tunix); "
          f"median", flush=True)
    env = child_env(args.malloc)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_tunix_") as d:
        try:
            for spec in args.models:
                rows += bench_model(args, spec, tunix_python, pathlib.Path(d), env)
        except SideError as e:
            print(f"\nbench_tunix: FAILED: {e}", file=sys.stderr)
            return 1
    print("\n" + format_table(rows))
    for r in rows:
        print(f"ratio ({r.model}, {r.mode}, ours / Tunix): {r.ratio:.2f}x")
    print(f"load after: {load_report()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
