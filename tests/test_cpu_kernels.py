"""The native CPU decode-attention kernel against the model's XLA attention."""

import logging
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mle_rl import sampling
from mle_rl.models import config as mcfg
from mle_rl.models import cpu_kernels, qwen2
from mle_rl.models import sharding as shd
from mle_rl.models.linear import dense



def _have_compiler() -> bool:
    try:
        cpu_kernels._compiler()
        return True
    except cpu_kernels.KernelBuildError:
        return False


# Skipped only where no compiler exists. With one, a kernel that does not build fails here
# (the sampler would silently fall back to XLA, so nothing else would notice).
needs_kernel = pytest.mark.skipif(not _have_compiler(), reason="no C++ compiler on this machine")


@pytest.fixture
def kernel():
    assert cpu_kernels.available(), cpu_kernels._state.get("error")


@needs_kernel
def test_kernel_builds_and_loads(kernel):
    assert cpu_kernels._state["path"].exists()


def _attention(kv, groups, hd):
    cfg = mcfg.ModelConfig(vocab_size=64, hidden_size=kv * groups * hd, intermediate_size=32,
                           num_layers=1, num_heads=kv * groups, num_kv_heads=kv, head_dim=hd,
                           rope_theta=10000.0)
    return qwen2.init_model(cfg, seed=0).layers[0].attn


def _inputs(b, kv, groups, hd, s, seed):
    rs = np.random.RandomState(seed)
    q = rs.randn(b, kv, groups, 1, hd).astype(np.float32) * 3
    k_t = rs.randn(b, kv, hd, s).astype(np.float32)
    v = rs.randn(b, kv, s, hd).astype(np.float32)
    valid = rs.rand(b, s) < 0.7
    valid[:, 0] = True
    valid[-1] = False          # a row with every key masked (uniform weights, as in XLA)
    return map(jnp.asarray, (q, k_t, v, valid))


# (batch, kv heads, query heads per kv head, head_dim, slots): full register tiles (G = 3,
# hd = 64, S % 32 == 0) and every tail: G not a multiple of 3, hd and S not multiples of 32.
SHAPES = [(16, 2, 3, 64, 288), (3, 2, 7, 64, 96), (2, 1, 1, 16, 5), (4, 2, 2, 40, 37),
          (2, 4, 4, 128, 70), (1, 1, 5, 8, 33)]


@pytest.mark.parametrize("shape", SHAPES)
@needs_kernel
def test_kernel_matches_xla_attention(kernel, shape):
    b, kv, groups, hd, s = shape
    attn = _attention(kv, groups, hd)
    q, k_t, v, valid = _inputs(b, kv, groups, hd, s, seed=sum(shape))
    for slot in (s - 1, s // 2, 0):                    # keys past the slot are masked
        query_slot = jnp.asarray([slot])
        ref = jax.jit(lambda *a: attn._attend(*a, keys_transposed=True))(
            q, k_t, v, valid, query_slot)
        got = jax.jit(lambda *a: attn._attend(*a, keys_transposed=True, decode_kernel=True))(
            q, k_t, v, valid, query_slot)
        assert got.shape == ref.shape == (b, kv, groups, 1, hd)
        # Rows with a valid key: the same as XLA's softmax over every slot.
        np.testing.assert_allclose(np.asarray(got[:-1]), np.asarray(ref[:-1]), atol=2e-5,
                                   rtol=1e-5)
        # The row with every key masked: the plain mean of the values of slots [0, slot]
        # (uniform weights; the kernel does not read past the slot, where XLA averages all
        # slots: the sampler never makes such a row, a row's own token is valid).
        np.testing.assert_allclose(np.asarray(got[-1, :, :, 0]),
                                   np.broadcast_to(np.asarray(v[-1, :, :slot + 1]).mean(1)[:, None],
                                                   (kv, groups, hd)), atol=1e-5)


@needs_kernel
def test_kernel_never_reads_past_the_slot(kernel):
    q, k_t, v, valid = _inputs(2, 2, 3, 16, 64, seed=5)
    slot = 20
    attend = jax.jit(lambda *a: cpu_kernels.decode_attention(*a, -1e30))
    ref = attend(q[:, :, :, 0], k_t, v, valid, slot)
    k_bad, v_bad = np.asarray(k_t).copy(), np.asarray(v).copy()
    k_bad[..., slot + 1:] = np.nan          # a NaN read anywhere would spread to the output
    v_bad[:, :, slot + 1:] = np.nan
    got = attend(q[:, :, :, 0], jnp.asarray(k_bad), jnp.asarray(v_bad), valid, slot)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))


@needs_kernel
def test_kernel_rejects_other_dtypes(kernel):
    q, k_t, v, valid = _inputs(2, 1, 1, 16, 8, seed=0)
    with pytest.raises(TypeError, match="float32"):
        cpu_kernels.decode_attention(q[:, :, :, 0].astype(jnp.bfloat16), k_t, v, valid, 3, -1e30)


@needs_kernel
def test_kernel_rejects_mismatched_shapes(kernel):
    q, k_t, v, valid = _inputs(2, 1, 1, 16, 8, seed=0)
    with pytest.raises(Exception, match="shapes do not match"):
        jax.block_until_ready(cpu_kernels.decode_attention(q[:, :, :, 0], k_t, v[:, :, :5],
                                                           valid, 3, -1e30))


@needs_kernel
@pytest.mark.parametrize("tied", [False, True])
def test_sampler_uses_kernels_and_matches_uncached_forward(kernel, monkeypatch, tied):
    """Greedy decoding through the kernels: each token is the uncached forward's argmax (up
    to a near-tie of 1e-4) and each log-prob its log-softmax (1e-4), teacher-forced, so a
    tie broken the other way cannot make the test flaky. Both kernels are traced into the
    decode loop (and neither when switched off)."""
    cfg = mcfg.ModelConfig(vocab_size=512, hidden_size=192, intermediate_size=256,
                           num_layers=2, num_heads=6, num_kv_heads=2, head_dim=32,
                           rope_theta=10000.0, tie_word_embeddings=tied)
    model = qwen2.init_model(cfg, seed=1)
    prompts = [[1, 2, 3], list(range(5, 40)), [7], list(range(100, 120)), [9, 8], [300] * 9,
               [4], list(range(200, 213))]                  # 8 rows: a row tail of 2
    calls = []
    for name in ("decode_attention", "packed_matmul"):
        real = getattr(cpu_kernels, name)
        monkeypatch.setattr(cpu_kernels, name, lambda *a, _real=real, _name=name, **k:
                            calls.append(_name) or _real(*a, **k))
    for flag in (False, True):
        monkeypatch.setattr(sampling, "CPU_DECODE_KERNEL", flag)
        sampling._DECODE_JITS.clear()       # trace again, so the counter sees the trace
        calls.clear()
        traced = sampling.TRACE_COUNTS["decode"]
        out = sampling.generate(model, prompts, max_new_tokens=70, rng=3, temperature=0.0)
        # per decode phase traced: one attention per layer; 4 projections per layer + head
        attn, mm = calls.count("decode_attention"), calls.count("packed_matmul")
        assert (attn > 0) == flag and len(calls) == attn + mm
        assert mm * cfg.num_layers == attn * (4 * cfg.num_layers + 1)
        # DECODE_WINDOWS "auto": the kernels decode all 70 tokens in one phase (their
        # attention stops at each step's slot); XLA in two (64 slots, then 128).
        assert sampling.TRACE_COUNTS["decode"] - traced == (1 if flag else 2)
    sampling._DECODE_JITS.clear()
    assert len(set(out.tokens.ravel().tolist())) > 8            # not a constant path
    for i, prompt in enumerate(prompts):
        seq = list(prompt) + out.tokens[i].tolist()
        logits = np.asarray(qwen2.forward(model, jnp.asarray([seq + [0] * (128 - len(seq))]))[
            0, len(prompt) - 1:len(seq) - 1], np.float64)
        picked = logits[np.arange(70), out.tokens[i]]
        assert (picked >= logits.max(-1) - 1e-4).all()
        log_softmax = picked - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) \
            - logits.max(-1)
        np.testing.assert_allclose(out.logprobs[i], log_softmax, atol=1e-4)


@needs_kernel
def test_a_one_device_mesh_decodes_in_the_kernels(kernel, monkeypatch):
    """The trainer samples on a mesh of this host's devices: with one CPU device that mesh
    has one device, and the kernels decode there too, with the tokens of a call without a
    mesh (a mesh of several devices keeps XLA)."""
    cfg = mcfg.ModelConfig(vocab_size=320, hidden_size=96, intermediate_size=128,
                           num_layers=2, num_heads=6, num_kv_heads=2, head_dim=16,
                           rope_theta=10000.0)
    model = qwen2.init_model(cfg, seed=2)
    prompts = [[1, 2, 3], list(range(5, 30)), [7]]
    calls = []
    real = cpu_kernels.decode_attention
    monkeypatch.setattr(cpu_kernels, "decode_attention",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(sampling, "CPU_DECODE_KERNEL", True)
    plain = sampling.generate(model, prompts, max_new_tokens=40, rng=0, temperature=0.0)
    sampling._DECODE_JITS.clear()
    calls.clear()
    one = shd.make_mesh((1, 1), jax.devices()[:1])
    meshed = sampling.generate(model, prompts, max_new_tokens=40, rng=0, temperature=0.0,
                               mesh=one)
    assert calls, "the kernels were not traced into the 1-device mesh's decode loop"
    np.testing.assert_array_equal(plain.tokens, meshed.tokens)
    np.testing.assert_allclose(plain.logprobs, meshed.logprobs, atol=1e-6)
    if jax.device_count() >= 2:
        _, state = qwen2.nnx.split(model)
        assert not sampling._use_decode_kernel(model, state, shd.make_mesh((2, 1),
                                                                           jax.devices()[:2]))
    sampling._DECODE_JITS.clear()


def test_failed_build_falls_back(monkeypatch, tmp_path, caplog):
    """No usable compiler: a warning, the kernel is unavailable, the sampler uses XLA."""
    monkeypatch.setattr(cpu_kernels, "_state", {})
    monkeypatch.setenv("CXX", "false")                 # exists, compiles nothing
    monkeypatch.setenv(cpu_kernels.ENV_CACHE, str(tmp_path))
    with caplog.at_level(logging.WARNING):
        assert not cpu_kernels.available()
    assert "unavailable" in caplog.text and "failed" in caplog.text
    assert not list(tmp_path.glob("*.so"))             # no half-written library left
    model = qwen2.init_model(mcfg.ModelConfig(vocab_size=64, hidden_size=32,
                                              intermediate_size=64, num_layers=1, num_heads=2,
                                              num_kv_heads=1, head_dim=16), seed=0)
    assert not sampling._use_decode_kernel(model, qwen2.nnx.split(model)[1], None)


def test_switch_off(monkeypatch):
    monkeypatch.setenv(cpu_kernels.ENV_SWITCH, "0")
    assert not cpu_kernels.available()


@needs_kernel
def test_damaged_cache_entry_is_rebuilt(monkeypatch, tmp_path):
    """A truncated library would crash the loader (SIGBUS): it is detected by its checksum
    and built again before anything loads it."""
    monkeypatch.setattr(cpu_kernels, "_state", {})
    monkeypatch.setenv(cpu_kernels.ENV_CACHE, str(tmp_path))
    path = cpu_kernels.build()
    size = path.stat().st_size
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data[:1000])
    assert cpu_kernels.build() == path and path.stat().st_size == size
    path.with_suffix(".sha256").unlink()             # a build interrupted before its checksum
    mtime = path.stat().st_mtime_ns
    assert cpu_kernels.build() == path and path.stat().st_mtime_ns != mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [path.name, path.with_suffix(".sha256").name, ".lock"])      # no temp files left


@needs_kernel
def test_loading_keeps_denormals(tmp_path):
    """Linked with -ffast-math, the library would turn on flush-to-zero in the process that
    loads it (crtfastmath.o, GCC < 13): host-side float math would lose denormals."""
    code = ("import numpy as np\n"
            "from mle_rl.models import cpu_kernels\n"
            "assert cpu_kernels.available()\n"
            "tiny = np.float32(1e-39) * np.float32(1.0)\n"
            "assert tiny != 0 and 5e-324 * 1.0 != 0, tiny\n"
            "print('denormals kept')\n")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0 and "denormals kept" in proc.stdout, proc.stderr[-2000:]


# (rows, K, N): row tiles of 6 (AVX2) or 16 (AVX-512) and every row tail (1-15), K = 1,
# odd K, 1-128 panels (9 panels: a partial last chunk of the thread pool's share; 1-2
# panels: the prefetch of the panels ahead stays on the last one).
MATMUL_SHAPES = [(16, 384, 2048), (1, 7, 16), (5, 33, 48), (6, 64, 32), (13, 1, 160),
                 (17, 100, 112), (2, 65, 32), (3, 17, 64), (8, 40, 144), (9, 128, 48),
                 (31, 96, 64), (32, 1024, 32), (4, 20, 16), (11, 50, 48), (15, 9, 80)]


@needs_kernel
@pytest.mark.parametrize("shape", MATMUL_SHAPES)
def test_packed_matmul_matches_numpy(kernel, shape):
    m, k, n = shape
    rs = np.random.RandomState(m * 1000 + k + n)
    x = rs.randn(m, 1, k).astype(np.float32)            # decode: [B, 1, K]
    w = rs.randn(k, n).astype(np.float32)
    packed = cpu_kernels.pack(jnp.asarray(w))
    assert isinstance(packed, cpu_kernels.Packed) and packed.shape == (k, n)
    got = jax.jit(dense)(jnp.asarray(x), packed)
    assert got.shape == (m, 1, n) and got.dtype == jnp.float32
    ref = x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(np.asarray(got), ref, atol=1e-4 * np.sqrt(k), rtol=1e-5)


@needs_kernel
def test_tile_rows_follow_the_instruction_set(kernel):
    avx512 = ("avx512f" in cpu_kernels._cpu_flags().split()
              and "-mno-avx512f" not in cpu_kernels.compile_flags())
    assert cpu_kernels.tile_rows() == (16 if avx512 else 6)


@needs_kernel
@pytest.mark.skipif("avx512f" not in cpu_kernels._cpu_flags().split(),
                    reason="no AVX-512 here: the default build already is the AVX2 one")
def test_kernels_built_without_avx512_match(tmp_path):
    """The AVX2 build (6-row tiles), which this AVX-512 CPU does not run by default: its
    matmul and attention tests pass in a process that builds with -mno-avx512f (and find
    6-row tiles there)."""
    env = dict(os.environ, MLE_RL_KERNEL_CFLAGS="-mno-avx512f",
               MLE_RL_KERNEL_CACHE=str(tmp_path), MLE_RL_CPU_KERNELS="on")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
         "packed_matmul_matches or kernel_matches_xla or never_reads or rows_follow"],
        capture_output=True, text=True, env=env, timeout=600)
    ran = re.search(r"(\d+) passed", proc.stdout)
    assert proc.returncode == 0 and ran and int(ran.group(1)) >= 20, proc.stdout[-3000:]
    assert "skipped" not in proc.stdout, proc.stdout[-3000:]


def test_pack_leaves_other_matrices_to_xla():
    odd = jnp.ones((8, 20), jnp.float32)                 # 20 columns: not whole panels
    assert cpu_kernels.pack(odd) is odd
    half = jnp.ones((8, 32), jnp.bfloat16)
    assert cpu_kernels.pack(half) is half
    bias = jnp.ones((32,), jnp.float32)
    assert cpu_kernels.pack(bias) is bias


@needs_kernel
def test_packed_matmul_rejects_bad_input(kernel):
    packed = cpu_kernels.pack(jnp.ones((8, 32), jnp.float32))
    with pytest.raises(ValueError, match="does not match"):
        cpu_kernels.packed_matmul(jnp.ones((2, 7), jnp.float32), packed)
    with pytest.raises(TypeError, match="float32"):
        cpu_kernels.packed_matmul(jnp.ones((2, 8), jnp.bfloat16), packed)


# ----------------------------------------------------------------- jaxlib's FFI headers
def test_this_jaxlibs_ffi_headers_pass_the_check():
    version = cpu_kernels.check_ffi_headers()
    assert version[0] == cpu_kernels.FFI_API_VERSION[0]
    assert version[1] >= cpu_kernels.FFI_API_VERSION[1]


def _fake_headers(root, major, minor):
    api = root / "xla" / "ffi" / "api"
    api.mkdir(parents=True)
    for name in ("ffi.h", "api.h"):
        (api / name).write_text("// stand-in\n")
    (api / "c_api.h").write_text(f"#define XLA_FFI_API_MAJOR {major}\n"
                                 f"#define XLA_FFI_API_MINOR {minor}\n")
    return root


@pytest.mark.parametrize("case", ["missing_dir", "no_c_api", "major_1", "minor_older"])
def test_missing_or_mismatched_ffi_headers_name_both_jaxlibs_in_one_line(tmp_path, case):
    import jaxlib
    major, minor = cpu_kernels.FFI_API_VERSION
    if case == "missing_dir":
        root = tmp_path / "nowhere"
    elif case == "no_c_api":
        root = _fake_headers(tmp_path, major, minor)
        (root / "xla/ffi/api/c_api.h").unlink()
    elif case == "major_1":
        root = _fake_headers(tmp_path, major + 1, 0)
    else:
        if minor == 0:
            pytest.skip("no older minor version than 0")
        root = _fake_headers(tmp_path, major, minor - 1)
    with pytest.raises(cpu_kernels.KernelBuildError) as e:
        cpu_kernels.check_ffi_headers(root)
    msg = str(e.value)
    assert "\n" not in msg
    assert f"jaxlib {jaxlib.__version__}" in msg
    assert f"jaxlib=={cpu_kernels.pinned_jaxlib()}, pinned in constraints.txt" in msg
    assert cpu_kernels.pinned_jaxlib() != "unknown"      # read from the checkout's file


def test_newer_minor_ffi_headers_are_accepted(tmp_path):
    major, minor = cpu_kernels.FFI_API_VERSION
    assert cpu_kernels.check_ffi_headers(_fake_headers(tmp_path, major, minor + 1)) == (
        major, minor + 1)


def test_mismatched_ffi_headers_fall_back_to_xla_with_one_warning(monkeypatch, tmp_path,
                                                                  caplog):
    root = _fake_headers(tmp_path / "inc", cpu_kernels.FFI_API_VERSION[0] + 1, 0)
    monkeypatch.setattr(jax.ffi, "include_dir", lambda: str(root))
    monkeypatch.setattr(cpu_kernels, "_state", {})            # decided again, then restored
    monkeypatch.setenv(cpu_kernels.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.delenv(cpu_kernels.ENV_SWITCH, raising=False)
    with caplog.at_level(logging.WARNING, logger=cpu_kernels.__name__):
        assert not cpu_kernels.available()
        assert not cpu_kernels.available()                     # decided once
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "XLA path" in warnings[0]
    assert "pinned in constraints.txt" in warnings[0] and "\n" not in warnings[0]
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").glob("*.so"))
