"""Multi-host on one machine: 2 processes × 2 CPU devices through `jax.distributed` (gloo).

Each test launches `experiments/multihost_demo.py` as separate processes (JAX can join a
distributed run only before its backend starts, so not in this pytest process) and reads
the .npz each process writes.
"""

import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from mle_rl.runtime import distributed as dist
from mle_rl.models import sharding as shd

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO = ROOT / "experiments" / "multihost_demo.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _env():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)          # the device count comes from --cpu_devices
    return env


def _launch(out, processes, devices, *extra):
    """Run the demo as `processes` processes with `devices` CPU devices each; wait for all."""
    base = [sys.executable, str(DEMO), f"--out={out}", f"--cpu_devices={devices}", *extra]
    if processes > 1:
        base += [f"--coordinator_address=localhost:{_free_port()}",
                 f"--num_processes={processes}"]
    return [subprocess.Popen(base + ([f"--process_id={i}"] if processes > 1 else []),
                             env=_env(), cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
            for i in range(processes)]


def _wait(procs, timeout=240):
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, log in zip(procs, logs):
        assert p.returncode == 0, "\n".join(l for l in log.splitlines()
                                            if not l.startswith(("W0", "I0")))[-3000:]
    return logs


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 (forced) CPU devices")
def test_single_process_helpers_are_plain_placement():
    mesh = shd.make_mesh((2, 2))
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    g = dist.global_batch({"x": x}, mesh)["x"]
    assert g.sharding.spec == shd.P(shd.DATA, None)
    np.testing.assert_array_equal(np.asarray(g), x)
    assert dist.local_rows(mesh, 4) == slice(0, 4)
    assert dist.is_coordinator()
    local = dist.host_local_mesh(model=2)
    assert dict(local.shape) == {"data": 2, "model": 2}
    tree = {"w": g}
    assert dist.to_host_local(tree, local)["w"] is g       # already on this host's devices
    np.testing.assert_array_equal(dist.fetch(tree)["w"], x)
    dist.barrier("single")                                    # no-op, must not hang
    with pytest.raises(ValueError, match="model=3 does not divide"):
        dist.host_local_mesh(model=3)


def test_two_processes_assemble_a_global_batch_and_gather_params(tmp_path):
    out = tmp_path / "plumbing{process}.npz"
    _wait(_launch(out, 2, 2, "--mode=plumbing", "--mesh_shape=2,2"), timeout=120)
    full = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
    param = np.arange(8 * 4.0).reshape(8, 4)
    seen_devices = []
    for pid in range(2):
        r = np.load(str(out).format(process=pid))
        assert int(r["process_count"]) == 2
        # Host p fed rows [4p, 4p+4); the global array has all 8.
        assert r["rows"].tolist() == [4 * pid, 4 * pid + 4]
        assert r["global_shape"].tolist() == [8, 3]
        assert float(r["total"]) == full.sum()                  # cross-process reduction
        np.testing.assert_array_equal(r["doubled"], 2 * full)   # all-gather, in row order
        # A [data, model]-split parameter copied whole onto this host's own two devices.
        np.testing.assert_array_equal(r["local_param"], param)
        assert r["local_param_devices"].tolist() == r["local_devices"].tolist()
        seen_devices.append(set(r["local_devices"].tolist()))
    assert len(seen_devices[0]) == 2 and not seen_devices[0] & seen_devices[1]


@pytest.mark.slow
def test_ppo_on_two_processes_matches_one_process(tmp_path):
    """2 updates on a (2, 2) mesh: 2 hosts × 2 devices (FSDP) vs 1 host × 4 devices."""
    ref, mh = tmp_path / "ref.npz", tmp_path / "mh{process}.npz"
    procs = _launch(ref, 1, 4) + _launch(mh, 2, 2, "--fsdp")
    logs = _wait(procs, timeout=400)
    assert "feeds rows 4:8" in logs[2]
    r = np.load(ref)
    assert int(r["process_count"]) == 1 and int(r["device_count"]) == 4
    assert float(r["min_param_fraction_held"]) == 1.0
    params = [k for k in r.files if k.startswith(("policy", "critic"))]
    assert len(params) > 5
    for pid in range(2):
        m = np.load(str(mh).format(process=pid))
        assert int(m["process_count"]) == 2 and int(m["device_count"]) == 4
        assert float(m["min_param_fraction_held"]) == 0.5    # FSDP split some across hosts
        assert sorted(m.files) == sorted(r.files)
        for k in params:
            np.testing.assert_allclose(m[k], r[k], atol=1e-5, err_msg=k)
        for k in ("metrics/pg_loss", "metrics/vf_loss", "metrics/kl_ref", "metrics/clip_frac"):
            np.testing.assert_allclose(m[k], r[k], atol=1e-5, err_msg=k)
        # Host-local greedy sampling from the updated policy: same tokens as one process.
        np.testing.assert_array_equal(m["sample_tokens"], r["sample_tokens"])
        np.testing.assert_allclose(m["sample_logprobs"], r["sample_logprobs"], atol=1e-5)
    # The updates moved the policy far more than the 1e-5 tolerance.
    moved = max(np.abs(r[k] - r["init_" + k]).max() for k in params if k.startswith("policy"))
    assert moved > 1e-3
