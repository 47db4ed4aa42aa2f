"""Native XLA:CPU kernels in C++, called through `jax.ffi`, built on first use.

Two kernels for the sampler's decode steps (source: `cpu_kernels.cc`):
* `decode_attention`: the attention of one decode step over the KV cache.
* `packed_matmul`: `x @ w` for a few rows, with `w` packed once per sampling call
  (`pack`: panels of 16 columns, `Packed`); `linear.dense` dispatches on `Packed`.
The sampler uses them for single-device float32 decoding on CPU (no mesh, or a mesh of one
device: the trainer's on one CPU); everywhere else (training, prefill, GPU/TPU, several
devices, bfloat16) the model keeps its XLA path, which the kernels match
(tests/test_cpu_kernels.py).

Build: the first process that needs a kernel compiles it with the system C++ compiler
(`$CXX`, else `g++`, else `c++`), `-O3 -march=native` and then `$MLE_RL_KERNEL_CFLAGS`,
against the XLA FFI headers that ship with jaxlib, into a cache directory
(`$MLE_RL_KERNEL_CACHE`, default `~/.cache/mle_rl/kernels`). The file name hashes the
source, the flags, the compiler, the jaxlib version and the CPU's feature flags, so a
changed source or another CPU builds again; a build is written to a temporary file and
renamed, and a library is loaded only when it matches the checksum written after it (a
damaged one is built again), so no process loads a half-written or truncated library.
The matmul's register tiles follow the instruction set: 16 rows where the build has
AVX-512, 6 where it has AVX2 (`tile_rows()`). If there is no compiler or the build fails,
the kernel is reported unavailable once (a warning with the compiler's output) and callers
fall back to XLA. Before building, `check_ffi_headers` checks that jaxlib ships the FFI
headers, with the API version the source was written for; if not, that warning is one line
naming the jaxlib found and the one pinned in constraints.txt.

Which path decodes: the kernels are not faster everywhere (1.53x the XLA path on one
machine, 0.7-1.0x on a 2-core AMD EPYC), so by default each machine measures it, once.
`decode_path.py` runs a short interleaved A/B of whole sampling calls (~15-45 s) when the
library is first built or found here and caches the decision beside it (a JSON file named
after the library and the number of cores; a new source, compiler, jaxlib, jax or CPU
decides again). `MLE_RL_CPU_KERNELS` (`switch()`): `auto` (default: measured), `1`|`on`
(the kernels whenever they build), `0`|`off` (XLA; the kernels are not even built).
`sampling.CPU_DECODE_KERNEL = True|False` and `generate(..., decode_kernel=)` force a
path from code.
"""

from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

log = logging.getLogger(__name__)

ENV_SWITCH = "MLE_RL_CPU_KERNELS"
ENV_CACHE = "MLE_RL_KERNEL_CACHE"
ENV_CFLAGS = "MLE_RL_KERNEL_CFLAGS"   # extra compiler flags (e.g. -mno-avx512f), hashed too
# Compiled with -ffast-math (vectorised expf), linked without it: before GCC 13, a link with
# -ffast-math adds crtfastmath.o even to a shared library, whose constructor turns on
# flush-to-zero for the thread that loads it (host-side numpy would then lose denormals).
COMPILE_FLAGS = ("-std=c++17", "-O3", "-march=native", "-ffast-math", "-fPIC", "-w", "-c")
LINK_FLAGS = ("-shared",)
LINK_LIBS = ("-lmvec", "-lm")
STALE_TEMP_SECONDS = 3600   # temp files of an interrupted build older than this are removed
_SOURCE = Path(__file__).with_name("cpu_kernels.cc")
# jax.ffi target name -> exported handler symbol
_TARGETS = {"mle_rl_decode_attention": "MleRlDecodeAttention",
            "mle_rl_packed_matmul": "MleRlPackedMatmul"}
PANEL = 16   # columns per packed panel (kPanel in cpu_kernels.cc)

_lock = threading.Lock()
_state: dict = {}   # "ok": bool once decided; "error": why not; "lib": the loaded library
_bad_switches: set = set()   # unknown MLE_RL_CPU_KERNELS values already warned about


class KernelBuildError(RuntimeError):
    pass


# The XLA FFI C API (`xla/ffi/api/c_api.h`: XLA_FFI_API_MAJOR.MINOR) that cpu_kernels.cc is
# built and tested against: the headers of the jaxlib pinned in constraints.txt. A header of
# another major version is ABI-incompatible; an older minor may lack what the source uses.
FFI_API_VERSION = (0, 3)
FFI_HEADERS = ("xla/ffi/api/ffi.h", "xla/ffi/api/api.h", "xla/ffi/api/c_api.h")
_CONSTRAINTS = Path(__file__).resolve().parents[2] / "constraints.txt"


def pinned_jaxlib() -> str:
    """The jaxlib version constraints.txt pins ('unknown' without that file)."""
    try:
        for line in _CONSTRAINTS.read_text().splitlines():
            if line.strip().startswith("jaxlib=="):
                return line.strip().split("==", 1)[1]
    except OSError:
        pass
    return "unknown"


def check_ffi_headers(include_dir=None) -> tuple:
    """The (major, minor) XLA FFI API version of jaxlib's headers in `include_dir` (default:
    `jax.ffi.include_dir()`). Raises KernelBuildError, one line naming the jaxlib found
    and the one constraints.txt pins, when the directory or a header is missing or the API
    version does not match FFI_API_VERSION (same major, minor at least as new)."""
    import re
    import jaxlib
    found, pinned = jaxlib.__version__, pinned_jaxlib()
    want = ".".join(map(str, FFI_API_VERSION))

    def fail(problem):
        raise KernelBuildError(
            f"jaxlib {found} {problem}; cpu_kernels.cc needs XLA FFI API {want} (jaxlib=="
            f"{pinned}, pinned in constraints.txt): pip install -c constraints.txt jaxlib")
    try:
        root = Path(include_dir if include_dir is not None else jax.ffi.include_dir())
    except Exception as e:  # noqa: BLE001 - an old jax without jax.ffi.include_dir
        fail(f"has no XLA FFI header directory ({type(e).__name__}: {e})")
    missing = [h for h in FFI_HEADERS if not (root / h).is_file()]
    if missing:
        fail(f"has no {', '.join(missing)} under {root}")
    text = (root / FFI_HEADERS[2]).read_text(errors="replace")
    parts = [re.search(rf"#define\s+XLA_FFI_API_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR")]
    if not all(parts):
        fail(f"has a {FFI_HEADERS[2]} without XLA_FFI_API_MAJOR/MINOR under {root}")
    version = tuple(int(m.group(1)) for m in parts)
    if version[0] != FFI_API_VERSION[0] or version[1] < FFI_API_VERSION[1]:
        fail(f"ships XLA FFI API {version[0]}.{version[1]} headers ({root})")
    return version


def _compiler() -> str:
    for name in (os.environ.get("CXX"), "g++", "c++"):
        path = shutil.which(name) if name else None
        if path:
            return path
    raise KernelBuildError("no C++ compiler found (set $CXX, or install g++)")


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def cache_dir() -> Path:
    root = os.environ.get(ENV_CACHE) or os.path.join(os.path.expanduser("~"), ".cache",
                                                     "mle_rl", "kernels")
    return Path(root)


def build(source: Path = _SOURCE) -> Path:
    """Compile `source` into the cache (if not there yet) and return the library's path.
    Raises KernelBuildError with the compiler's output on failure."""
    import jaxlib
    check_ffi_headers()
    cxx = _compiler()
    version = _run([cxx, "--version"], timeout=60).stdout
    key = hashlib.sha256(b"\0".join([
        source.read_bytes(), " ".join(compile_flags() + LINK_FLAGS + LINK_LIBS).encode(),
        version.encode(), jaxlib.__version__.encode(), _cpu_flags().encode()])).hexdigest()[:16]
    out_dir = cache_dir()
    lib = out_dir / f"{source.stem}-{key}.so"
    digest = lib.with_suffix(".sha256")
    if _intact(lib, digest):
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    # One builder at a time per cache directory (xdist workers, several hosts' processes).
    with open(out_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _intact(lib, digest):            # built by another process while we waited
            return lib
        if lib.exists():
            log.warning("mle_rl: %s does not match its checksum; building it again.", lib)
        _remove_stale_temps(out_dir)
        obj, so, sha = (_temp_path(out_dir, source.stem, sfx) for sfx in (".o", ".so", ".sha256"))
        try:
            include = f"-I{jax.ffi.include_dir()}"
            for cmd in ([cxx, *compile_flags(), include, str(source), "-o", obj],
                        [cxx, *LINK_FLAGS, obj, "-o", so, *LINK_LIBS]):
                proc = _run(cmd, timeout=300)
                if proc.returncode != 0:
                    raise KernelBuildError(
                        f"building {source.name} against jaxlib {jaxlib.__version__}'s FFI "
                        f"headers (constraints.txt pins jaxlib=={pinned_jaxlib()}) failed "
                        f"({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
            # The checksum of the file we built goes in first, then the library is renamed
            # into place (never rewritten: another process may have the old one mapped).
            Path(sha).write_text(hashlib.sha256(Path(so).read_bytes()).hexdigest())
            os.replace(sha, digest)
            os.replace(so, lib)
        finally:
            for tmp in (obj, so, sha):
                if os.path.exists(tmp):
                    os.unlink(tmp)
    return lib


def compile_flags() -> tuple:
    """COMPILE_FLAGS, then the flags in $MLE_RL_KERNEL_CFLAGS (shell words)."""
    import shlex
    return COMPILE_FLAGS + tuple(shlex.split(os.environ.get(ENV_CFLAGS, "")))


def tile_rows() -> int:
    """Rows per register tile of the loaded `packed_matmul` (16 where the build has AVX-512,
    else 6). Call only after `available()` returned True."""
    return int(_state["lib"].MleRlTileRows())


def _run(cmd, timeout):
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)


def _remove_stale_temps(directory: Path) -> None:
    """Temp files left by a build that was killed (they start with a dot)."""
    now = time.time()
    for path in directory.glob(".*-*"):
        try:
            if now - path.stat().st_mtime > STALE_TEMP_SECONDS:
                path.unlink()
        except OSError:
            pass


def _temp_path(directory: Path, stem: str, suffix: str) -> str:
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}-", suffix=suffix, dir=directory)
    os.close(fd)
    return tmp


def _intact(lib: Path, digest: Path) -> bool:
    """The library exists and matches the checksum written after it was built. Loading a
    truncated shared library is not an error but a crash (SIGBUS when the loader touches
    the missing pages), so this is checked before every load."""
    try:
        return hashlib.sha256(lib.read_bytes()).hexdigest() == digest.read_text().strip()
    except OSError:
        return False


SWITCH_VALUES = {"0": "off", "off": "off", "1": "on", "on": "on", "auto": "auto", "": "auto"}


def switch() -> str:
    """`MLE_RL_CPU_KERNELS` as 'off' (0|off), 'on' (1|on) or 'auto' (the default: the
    decode path is measured, see decode_path.py). Another value: one warning, 'auto'."""
    raw = os.environ.get(ENV_SWITCH, "auto")
    value = SWITCH_VALUES.get(raw.strip().lower())
    if value is None:
        if raw not in _bad_switches:
            _bad_switches.add(raw)
            log.warning("mle_rl: %s=%r is not one of 0|off, 1|on, auto; using auto.",
                        ENV_SWITCH, raw)
        value = "auto"
    return value


def library_path():
    """The loaded library's path (after `available()` returned True), else None."""
    return _state.get("path")


def available() -> bool:
    """True when the kernels are built, loaded and registered with jax (never with
    `MLE_RL_CPU_KERNELS=0|off`). Decided once per process; a failure (no compiler, a failed
    build, a library that does not load) is logged once and means False."""
    if switch() == "off":
        return False
    with _lock:
        if "ok" not in _state:
            try:
                path = build()
                lib = ctypes.cdll.LoadLibrary(str(path))
                for target, symbol in _TARGETS.items():
                    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)),
                                                platform="cpu")
                _state.update(ok=True, lib=lib, path=path)
            except Exception as e:  # noqa: BLE001 - any failure here means "use XLA"
                _state.update(ok=False, error=str(e))
                log.warning("mle_rl: the native CPU decode kernels are unavailable; decoding "
                            "uses the XLA path. %s", e)
        return _state["ok"]


def decode_attention(q, k_t, v, key_valid, slot, mask_value: float):
    """q [B, KV, G, HD] f32 (scaled), k_t [B, KV, HD, S] f32, v [B, KV, S, HD] f32,
    key_valid [B, S] bool, slot: the query's cache slot (int scalar) -> [B, KV, G, HD] f32.
    Call only after `available()` returned True."""
    for name, x in (("q", q), ("k_t", k_t), ("v", v)):
        if x.dtype != jnp.float32:
            raise TypeError(f"decode_attention: {name} must be float32, got {x.dtype}")
    slot = jnp.asarray(slot, jnp.int32).reshape(1)
    call = jax.ffi.ffi_call("mle_rl_decode_attention", jax.ShapeDtypeStruct(q.shape, jnp.float32))
    return call(q, k_t, v, key_valid.astype(jnp.bool_), slot, mask_value=np.float32(mask_value))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Packed:
    """A float32 [K, N] matrix packed for `packed_matmul`: panels [N / 16, K, 16] (panel p
    holds columns 16p .. 16p + 15, row by row)."""
    panels: jax.Array

    @property
    def shape(self):
        n, k, c = self.panels.shape
        return (k, n * c)

    def astype(self, dtype):
        """Itself for float32 (the model's `kernel.astype(compute dtype)` passes it through);
        packed weights exist only in float32."""
        if jnp.dtype(dtype) != jnp.float32:
            raise TypeError(f"Packed weights are float32; cannot use them as {jnp.dtype(dtype)}")
        return self


def pack(w):
    """`Packed` form of a float32 [K, N] matrix with N a multiple of 16; anything else is
    returned as it is (and multiplied by XLA)."""
    if getattr(w, "ndim", 0) != 2 or w.dtype != jnp.float32 or w.shape[1] % PANEL:
        return w
    k, n = w.shape
    return Packed(w.reshape(k, n // PANEL, PANEL).transpose(1, 0, 2))


def packed_matmul(x, w: Packed):
    """x [..., K] float32 @ w (`Packed` [K, N]) -> [..., N] float32.
    Call only after `available()` returned True."""
    if x.dtype != jnp.float32:
        raise TypeError(f"packed_matmul: x must be float32, got {x.dtype}")
    k, n = w.shape
    if x.shape[-1] != k:
        raise ValueError(f"packed_matmul: x [..., {x.shape[-1]}] does not match w [{k}, {n}]")
    call = jax.ffi.ffi_call("mle_rl_packed_matmul",
                            jax.ShapeDtypeStruct(x.shape[:-1] + (n,), jnp.float32))
    return call(x, w.panels)
