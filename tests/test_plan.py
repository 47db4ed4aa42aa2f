"""The memory plan: the learner's update and the sampler lowered on abstract arrays
(`rl/aot.py`, `sampling.lower`), and `experiments/plan.py` end to end."""

import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mle_rl import sampling
from mle_rl.models import config as mcfg
from mle_rl.models import qwen2
from mle_rl.models import sharding as shd
from mle_rl.rl import aot
from mle_rl.rl.learner import Learner, PPOConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _layout(state):
    return jax.tree.map(lambda x: (tuple(x.shape), str(x.dtype), x.sharding), state)


@pytest.mark.parametrize("ppo", [PPOConfig(), PPOConfig(advantage="grpo", kl_ctrl="adaptive")],
                         ids=["gae", "grpo_adaptive_kl"])
def test_abstract_learner_lowers_the_trainers_update(ppo):
    """Same state layout (shapes, dtypes, shardings) as the concrete learner, and the same
    lowered program, without allocating a parameter."""
    mesh = shd.make_mesh((2, 2))
    cfg = mcfg.micro()
    concrete = Learner(qwen2.init_model(cfg), ppo, mesh=mesh, fsdp=True)
    abstract = aot.abstract_learner(cfg, ppo, mesh=mesh, fsdp=True)
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(abstract.state))
    assert jax.tree.structure(abstract.state) == jax.tree.structure(concrete.state)
    assert _layout(abstract.state) == _layout(concrete.state)
    assert (aot.lower_update(abstract, 8, 48).as_text()
            == aot.lower_update(concrete, 8, 48).as_text())


def test_fsdp_splits_the_state_over_the_devices():
    cfg = mcfg.tiny()
    sizes = {}
    for name, shape, fsdp in (("replicated", (4, 1), False), ("fsdp", (4, 1), True),
                              ("tp", (1, 4), False)):
        state = aot.abstract_learner(cfg, PPOConfig(), mesh=shd.make_mesh(shape),
                                     fsdp=fsdp).state
        per_device = sum(int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize
                         for x in jax.tree.leaves((state.policy, state.critic, state.ref)))
        sizes[name] = per_device
    whole = sizes["replicated"]
    assert whole > 3 * 4 * cfg.num_params * 0.99            # policy + critic + ref, float32
    assert sizes["fsdp"] == pytest.approx(whole / 4, rel=0.01)
    assert sizes["tp"] < whole / 2


@pytest.mark.parametrize("mode,count", [("fine", 6), ("double", 4), ("two", 2), ("one", 1)])
def test_phase_windows_are_the_phases_generate_runs(monkeypatch, mode, count):
    monkeypatch.setattr(sampling, "DECODE_WINDOWS", mode)
    grown = []
    real_grow = sampling._grow
    monkeypatch.setattr(sampling, "_grow", lambda cache, key_valid, extra, **k: (
        # growths between phases (not the one traced into the prefill program)
        isinstance(key_valid, jax.core.Tracer) or grown.append(extra),
        real_grow(cache, key_valid, extra=extra, **k))[1])
    model = qwen2.init_model(mcfg.micro())
    sampling.generate(model, [[1, 2, 3]], max_new_tokens=100, rng=0, temperature=0.0)
    windows = sampling.phase_windows(100)
    first = 128 if mode == "one" else sampling.FIRST_WINDOW       # "one": the whole bucket
    assert windows[0] == first and windows[-1] >= 100
    assert grown == list(np.diff(windows))
    long = sampling.phase_windows(512)            # "two": two compilations at any length
    assert len(long) == count and long[-1] == 512
    assert long[0] == (512 if mode == "one" else sampling.FIRST_WINDOW)


def test_auto_phases_follow_the_decode_path(monkeypatch):
    monkeypatch.setattr(sampling, "DECODE_WINDOWS", "auto")
    assert sampling.phase_windows(512, kernels=True) == [512]
    assert sampling.phase_windows(512, kernels=False) == [64, 128, 192, 256, 384, 512]
    monkeypatch.setattr(sampling, "DECODE_WINDOWS", "fast")           # not a mode: an error
    with pytest.raises(ValueError, match="DECODE_WINDOWS must be one of"):
        sampling.phase_windows(512)
    with pytest.raises(ValueError, match="DECODE_WINDOWS must be one of"):
        sampling.generate(qwen2.init_model(mcfg.micro()), [[1, 2]], max_new_tokens=4, rng=0)


def test_sampler_lowers_on_a_mesh_with_abstract_parameters():
    mesh = shd.make_mesh((2, 2))
    learner = aot.abstract_learner(mcfg.micro(), PPOConfig(), mesh=mesh, fsdp=True)
    compiled = sampling.lower(learner.policy(learner.state), batch=3, prompt_len=20,
                              max_new_tokens=100, mesh=mesh)
    assert set(compiled) == {"prefill", "grow", "decode"}
    for c in compiled.values():
        assert c.memory_analysis().argument_size_in_bytes > 0
    out_tok = compiled["decode"].output_shardings[5]                # [B, G] tokens
    assert out_tok.spec[0] == shd.DATA


def _plan(*flags, devices=4):
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)                      # plan.py sets its own device count
    proc = subprocess.run([sys.executable, str(ROOT / "experiments" / "plan.py"), *flags,
                           f"--devices={devices}"], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=900)
    return proc


def test_plan_prints_one_json_line_with_the_memory_per_device():
    proc = _plan("--model_preset=micro", "--mesh_shape=4,1", "--fsdp", "--batch_size=8",
                 "--minibatches=2", "--max_prompt_tokens=16", "--max_new_tokens=80",
                 "--sample_batch=4")
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads(proc.stdout.strip().splitlines()[-1])
    assert plan["devices"] == 4 and plan["mesh"] == {"data": 4, "model": 1}
    assert plan["num_params"] == mcfg.micro().num_params
    b = plan["per_device_bytes"]
    # params: policy + critic + reference (float32), about 1/4 each with FSDP
    assert b["params"] == pytest.approx(3 * 4 * plan["num_params"] / 4, rel=0.05)
    assert b["optimizer"] == pytest.approx(2 * b["params"] * 2 / 3, rel=0.05)   # mu, nu x 2
    assert b["update"]["alias"] == b["state"]                       # the state is donated
    assert b["update"]["arguments"] > b["state"]                    # + the batch
    assert set(b["sampler"]) == {"prefill", "grow", "decode", "peak"}
    assert b["total"] == max(b["update"]["peak"], b["sampler"]["peak"])
    assert set(plan["fits"]) >= {"A100-80GB", "H100-80GB", "H200-141GB", "TPU-v5e-16GB",
                                 "TPU-v5p-95GB"}
    assert all(plan["fits"].values())
    assert plan["host_bytes"] is None        # 4 devices stand for accelerators


def test_plan_without_compiling_gives_the_exact_state_of_a_7b_run():
    """Qwen2.5-7B, policy + critic + reference in bfloat16 on 64 devices: never allocated;
    with FSDP each device holds 1/64 of the parameters and of both AdamW moments."""
    plans = {}
    for fsdp in (False, True):
        proc = _plan("--model_preset=qwen2p5_7b", "--dtype=bfloat16", "--nocompile",
                     "--fsdp" if fsdp else "--nofsdp", devices=64)
        assert proc.returncode == 0, proc.stderr[-2000:]
        plans[fsdp] = json.loads(proc.stdout.strip().splitlines()[-1])
    whole, split = plans[False], plans[True]
    n = mcfg.qwen2p5_7b().num_params
    assert whole["num_params"] == n and whole["devices"] == 64
    assert whole["per_device_bytes"]["params"] == pytest.approx(3 * 2 * n, rel=0.01)
    assert split["per_device_bytes"]["params"] == pytest.approx(3 * 2 * n / 64, rel=0.02)
    assert split["per_device_bytes"]["optimizer"] == pytest.approx(2 * 2 * 2 * n / 64, rel=0.02)
    assert split["per_device_bytes"]["update"] is None
    assert split["per_device_bytes"]["total"] == split["per_device_bytes"]["state"]
    assert split["method"].startswith("state only")
    assert not whole["fits"]["A100-80GB"] and split["fits"]["TPU-v5e-16GB"]


def test_plan_refuses_a_mesh_that_does_not_match_the_devices():
    proc = _plan("--model_preset=micro", "--mesh_shape=2,3", "--sampler=false")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --mesh_shape=2,3 needs 6")


@pytest.mark.slow
def test_extrapolated_plan_is_close_to_the_full_compile(tmp_path):
    """A 6-layer model: compiled at 2 and 4 layers and extrapolated vs compiled whole."""
    from mle_rl.models import hf
    cfg = mcfg.ModelConfig(**{**mcfg.micro().__dict__, "num_layers": 6})
    path = tmp_path / "m"
    hf.save(qwen2.init_model(cfg), path)
    common = ("--policy_dir", str(path), "--batch_size=8", "--minibatches=2", "--remat",
              "--max_prompt_tokens=32", "--max_new_tokens=96", "--sample_batch=4", "--fsdp")
    full, extra = (_plan(*common, *more) for more in ((), ("--extrapolate_layers=2,4",)))
    assert full.returncode == 0 and extra.returncode == 0, (full.stderr + extra.stderr)[-2000:]
    full, extra = (json.loads(p.stdout.strip().splitlines()[-1]) for p in (full, extra))
    assert extra["method"].startswith("extrapolated")
    for key in ("params", "optimizer", "state"):
        assert extra["per_device_bytes"][key] == full["per_device_bytes"][key]
    for part in ("update", "sampler"):
        assert extra["per_device_bytes"][part]["peak"] == pytest.approx(
            full["per_device_bytes"][part]["peak"], rel=0.1)


@pytest.mark.slow
def test_one_device_plan_adds_the_host_process_tokenizer_and_compiles(tmp_path):
    """--devices=1 (this host's memory, as the trainer runs on CPU): the plan adds what its
    own process measures: the policy's tokenizer, and the RSS each compile leaves. Several
    devices stand for accelerators: no host figures. Slow (three compiling plans, ~90 s on
    2 slow cores; launch/slow_tests.sh runs it): CI checks the plan's JSON line and its
    per-device figures (test_plan_prints_one_json_line_with_the_memory_per_device)."""
    from mle_rl.models import hf
    from mle_rl.warmstart import tokenizer as tok_lib
    path = tmp_path / "m"
    hf.save(qwen2.init_model(mcfg.micro()), path)
    texts = ["import numpy as np\ntrain = pd.read_csv('input/train.csv')\n",
             "a random forest on the raw columns\n"] * 50
    tok_lib.save(tok_lib.train(texts, vocab_size=300), path)
    common = ("--policy_dir", str(path), "--batch_size=2", "--minibatches=1",
              "--max_prompt_tokens=16", "--max_new_tokens=16", "--sample_batch=2")
    one = _plan(*common, devices=1)
    assert one.returncode == 0, one.stderr[-2000:]
    plan = json.loads(one.stdout.strip().splitlines()[-1])
    b, host = plan["per_device_bytes"], plan["host_bytes"]
    assert plan["num_params"] == mcfg.micro().num_params       # the checkpoint, not a preset
    assert host["tokenizer"] > 0 and host["compile_update"] > 0 and host["compile_sampler"] > 0
    fixed = host["tokenizer"] + host["compile_sampler"]
    phases = [b["sampler"][k] for k in b["sampler"] if k != "peak"]
    top = max(phases, key=lambda m: m["peak"])
    assert host["sampler_kept"] == sum(m["temp"] for m in phases) - top["temp"] >= 0
    assert host["host_sampler"] == b["sampler"]["peak"] + fixed + host["sampler_kept"]
    assert host["host_update"] == b["update"]["peak"] + fixed + host["compile_update"]
    assert "host process" in one.stdout
    two = _plan(*common, "--extrapolate_layers=1,2", devices=1)
    assert two.returncode == 0, two.stderr[-2000:]
    assert json.loads(two.stdout.strip().splitlines()[-1])["host_bytes"] is None
    alone = _plan(*common, "--nosampler", devices=1)             # the update's figures only
    assert alone.returncode == 0, alone.stderr[-2000:]
    host = json.loads(alone.stdout.strip().splitlines()[-1])["host_bytes"]
    assert "host_sampler" not in host and host["host_update"] > 0
    assert "host process: sampler -," in alone.stdout
