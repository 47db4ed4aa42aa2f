"""Choosing the CPU decode path (native kernels or XLA): forced, measured once, cached.

The measurement is replaced by a counter everywhere but in the last test (no timings are
asserted), and the kernel library by a name in a temporary directory, so nothing here
builds or compiles except that last test."""

import json
import logging
import threading
import time
import types

import jax
import pytest

from mle_rl import sampling
from mle_rl.models import config as mcfg
from mle_rl.models import cpu_kernels, decode_path, qwen2

from tests.test_cpu_kernels import needs_kernel


class FakeMeasure:
    """Stands in for `decode_path.measure`: counts its calls; kernels `speedup` x as fast."""

    def __init__(self, speedup=1.5, fail=False, delay=0.0):
        self.calls, self.speedup, self.fail, self.delay = 0, speedup, fail, delay

    def __call__(self, generate):
        self.calls += 1
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("out of memory")
        return {"kernel_s": [1.0, 1.0, 1.0], "xla_s": [self.speedup] * 3,
                "warmup_s": {"kernels": 1.0, "xla": 1.0}, "seconds": 9.0}


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """Kernels 'available' with a library in tmp_path, no choice made in this process yet,
    MLE_RL_CPU_KERNELS unset (auto), sampling.CPU_DECODE_KERNEL None. -> the fake measure."""
    monkeypatch.setattr(cpu_kernels, "available", lambda: True)
    monkeypatch.setattr(cpu_kernels, "library_path", lambda: tmp_path / "cpu_kernels-abc.so")
    monkeypatch.setattr(decode_path, "_choices", {})
    monkeypatch.setattr(decode_path, "_announced", set())
    monkeypatch.delenv(cpu_kernels.ENV_SWITCH, raising=False)
    monkeypatch.setattr(sampling, "CPU_DECODE_KERNEL", None)
    fake = FakeMeasure()
    monkeypatch.setattr(decode_path, "measure", fake)
    return fake


def _forget(monkeypatch):
    """As if in a new process: the in-process choice is gone, the file stays."""
    monkeypatch.setattr(decode_path, "_choices", {})


@pytest.mark.parametrize("value,mode", [("0", "off"), ("off", "off"), (" OFF ", "off"),
                                        ("1", "on"), ("on", "on"), ("auto", "auto"),
                                        ("", "auto")])
def test_switch_values(monkeypatch, value, mode):
    monkeypatch.setenv(cpu_kernels.ENV_SWITCH, value)
    assert cpu_kernels.switch() == mode


def test_unknown_switch_value_warns_once_and_means_auto(monkeypatch, caplog):
    monkeypatch.setenv(cpu_kernels.ENV_SWITCH, "fast-please")
    monkeypatch.setattr(cpu_kernels, "_bad_switches", set())
    with caplog.at_level(logging.WARNING, logger=cpu_kernels.__name__):
        assert cpu_kernels.switch() == "auto" and cpu_kernels.switch() == "auto"
    assert len([r for r in caplog.records if "fast-please" in r.getMessage()]) == 1


def _cpu_model():
    model = qwen2.init_model(mcfg.micro(), seed=0)
    return model, qwen2.nnx.split(model)[1]


@pytest.mark.parametrize("value,kernels", [("off", False), ("0", False), ("on", True),
                                           ("1", True)])
def test_env_forces_each_path_without_measuring(fresh, monkeypatch, value, kernels):
    monkeypatch.setenv(cpu_kernels.ENV_SWITCH, value)
    fresh.speedup = 0.5 if kernels else 2.0            # a measurement would say the opposite
    choice = sampling.cpu_decode_path()
    assert choice.kernels is kernels and choice.how == "forced" and fresh.calls == 0
    assert f"{cpu_kernels.ENV_SWITCH}={value}" in choice.line
    model, state = _cpu_model()
    assert sampling._use_decode_kernel(model, state, None) is kernels
    assert fresh.calls == 0 and not list(decode_path.decision_file().parent.glob("*.json"))


def test_code_forces_each_path_over_the_environment(fresh, monkeypatch):
    model, state = _cpu_model()
    for flag in (True, False):
        monkeypatch.setattr(sampling, "CPU_DECODE_KERNEL", flag)
        assert sampling.cpu_decode_path().kernels is flag
        assert sampling._use_decode_kernel(model, state, None) is flag
        # generate(decode_kernel=...) wins over both, and never asks for the choice
        assert sampling._use_decode_kernel(model, state, None, force=not flag) is (not flag)
    assert fresh.calls == 0


def test_env_off_means_no_kernels_even_when_code_asks(fresh, monkeypatch):
    monkeypatch.setattr(cpu_kernels, "available", lambda: cpu_kernels.switch() != "off")
    monkeypatch.setenv(cpu_kernels.ENV_SWITCH, "off")
    monkeypatch.setattr(sampling, "CPU_DECODE_KERNEL", True)
    choice = sampling.cpu_decode_path()
    assert not choice.kernels and choice.how == "unavailable" and "=off" in choice.line


@pytest.mark.parametrize("speedup,kernels", [(1.4, True), (0.8, False), (1.02, False)])
def test_auto_measures_once_then_reuses_the_cached_decision(fresh, monkeypatch, caplog,
                                                            speedup, kernels):
    fresh.speedup = speedup
    with caplog.at_level(logging.WARNING, logger=decode_path.__name__):
        first = sampling.cpu_decode_path()
        assert sampling.cpu_decode_path() is first               # once per process
    assert first.how == "measured" and first.kernels is kernels and fresh.calls == 1
    said = [r.getMessage() for r in caplog.records if "CPU decode path:" in r.getMessage()]
    assert len(said) == 1 and f"{speedup:.2f}x" in said[0] and str(first.file) in said[0]
    record = json.loads(first.file.read_text())
    assert record["path"] == ("kernels" if kernels else "xla")
    assert record["key"] == decode_path.decision_key() and record["speedup"] == speedup
    assert first.file.parent == decode_path.decision_file().parent        # beside the library
    assert first.file.name.startswith("cpu_kernels-abc-")

    _forget(monkeypatch)                                          # a new process
    fresh.speedup = 1 / speedup                                   # would decide otherwise
    again = sampling.cpu_decode_path()
    assert again.how == "cached" and again.kernels is kernels and fresh.calls == 1
    assert "decided " in again.line and str(first.file) in again.line
    model, state = _cpu_model()
    assert sampling._use_decode_kernel(model, state, None) is kernels and fresh.calls == 1


def test_a_chosen_path_still_needs_the_kernels(fresh, monkeypatch):
    """A choice made earlier in the process does not outlive the kernels (e.g. a test that
    makes their build fail): no kernels, no kernel path."""
    model, state = _cpu_model()
    assert sampling.cpu_decode_path().kernels
    assert sampling._use_decode_kernel(model, state, None)
    monkeypatch.setattr(cpu_kernels, "available", lambda: False)
    assert not sampling._use_decode_kernel(model, state, None)
    assert not sampling._use_decode_kernel(model, state, None, force=True)


@pytest.mark.parametrize("content", ["", "{", '{"key": ', "not json at all", "[1, 2]",
                                     "null", "partial"])
def test_corrupt_or_partial_decision_is_ignored_and_decided_again(fresh, content):
    path = decode_path.decision_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    if content == "partial":                    # a record without its path and speedup
        content = json.dumps({"key": decode_path.decision_key(), "decided": "yesterday"})
    path.write_text(content)
    choice = sampling.cpu_decode_path()
    assert choice.how == "measured" and fresh.calls == 1
    assert decode_path.read_decision(path, decode_path.decision_key())["path"] == "kernels"


def test_a_decision_made_for_another_key_is_decided_again(fresh, monkeypatch):
    first = sampling.cpu_decode_path()
    record = json.loads(first.file.read_text())
    record.update(key=record["key"].replace("jax=", "jax=0.0.0-other-"), path="xla",
                  speedup=0.5)
    first.file.write_text(json.dumps(record))
    _forget(monkeypatch)
    again = sampling.cpu_decode_path()
    assert again.how == "measured" and again.kernels and fresh.calls == 2
    # another library (new source, compiler, jaxlib or CPU): another file, decided again
    _forget(monkeypatch)
    monkeypatch.setattr(cpu_kernels, "library_path",
                        lambda: first.file.parent / "cpu_kernels-def.so")
    other = sampling.cpu_decode_path()
    assert other.how == "measured" and other.file != first.file and fresh.calls == 3
    # other core counts keep their own decisions
    _forget(monkeypatch)
    monkeypatch.setattr(decode_path, "cores", lambda: 977)
    assert sampling.cpu_decode_path().how == "measured" and fresh.calls == 4
    assert "977cpu" in decode_path.decision_file().name


def test_failed_measurement_means_xla_and_nothing_cached(fresh, monkeypatch, caplog):
    fresh.fail = True
    with caplog.at_level(logging.WARNING, logger=decode_path.__name__):
        choice = sampling.cpu_decode_path()
    assert not choice.kernels and choice.how == "failed" and "out of memory" in choice.line
    assert not decode_path.decision_file().exists()
    assert any("XLA" in r.getMessage() for r in caplog.records)


def test_no_kernels_means_xla_without_measuring(fresh, monkeypatch):
    monkeypatch.setattr(cpu_kernels, "available", lambda: False)
    monkeypatch.setattr(cpu_kernels, "_state", {"ok": False, "error": "no C++ compiler found"})
    choice = sampling.cpu_decode_path()
    assert not choice.kernels and choice.how == "unavailable" and fresh.calls == 0
    assert "no C++ compiler found" in choice.line


def test_processes_deciding_at_once_measure_once(fresh):
    """Two deciders at once (as two processes: each opens the lock file itself, so the
    in-process lock is bypassed): one measures, the other waits and reads its file."""
    fresh.delay = 0.5
    results = []

    def decide():
        results.append(decode_path._decide("auto", None, sampling.generate))

    threads = [threading.Thread(target=decide) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert fresh.calls == 1 and sorted(c.how for c in results) == ["cached", "measured"]
    assert {c.kernels for c in results} == {True}
    assert not [p for p in decode_path.decision_file().parent.iterdir()
                if p.name.startswith(".") and p.suffix == ".json"]      # no temp file left


class FakeClock:
    """`decode_path.time` with a clock that only the fake `generate` moves."""

    def __init__(self, durations):
        self.now, self.durations, self.calls = 0.0, durations, []
        self.strftime, self.gmtime = time.strftime, time.gmtime

    def perf_counter(self):
        return self.now

    def generate(self, model, prompts, *, max_new_tokens, rng, temperature, decode_kernel):
        assert temperature == 1.0 and len(prompts) == 2 and len(prompts[0]) == 4
        self.calls.append(decode_kernel)
        self.now += self.durations(len(self.calls), decode_kernel)
        return types.SimpleNamespace(tokens=[[0] * max_new_tokens] * len(prompts))


def _measure(monkeypatch, durations, **kw):
    clock = FakeClock(durations)
    monkeypatch.setattr(decode_path, "time", clock)
    out = decode_path.measure(clock.generate, cfg=mcfg.micro(), batch=2, prompt_len=4,
                              new_tokens=3, **kw)
    return clock.calls, out


def test_measure_interleaves_forced_paths_after_a_warm_up_each(monkeypatch):
    calls, out = _measure(monkeypatch, lambda n, k: 1.0 if k else 2.0, pairs=3, max_pairs=9)
    # warm-ups, then K X, X K, K X; every pair agrees (kernels 2x): no more pairs
    assert calls == [True, False, True, False, False, True, True, False]
    assert out["kernel_s"] == [1.0] * 3 and out["xla_s"] == [2.0] * 3
    assert out["shape"]["pairs"] == 3
    assert decode_path.decision(out, "k")["speedup"] == 2.0


def test_measure_adds_pairs_while_they_disagree_up_to_a_limit(monkeypatch):
    # pair 1 (calls 3, 4): XLA 2x slower; pair 2 (calls 5, 6): XLA 2x faster; then even
    def durations(n, kernels):
        if n in (3, 6):
            return 1.0
        if n in (4, 5):
            return 2.0 if n == 4 else 0.5
        return 1.0
    calls, out = _measure(monkeypatch, durations, pairs=2, max_pairs=5, budget_s=1e9)
    assert len(out["kernel_s"]) == 5 and len(calls) == 2 + 10
    # ... or up to the time budget of the timed calls
    calls, out = _measure(monkeypatch, durations, pairs=2, max_pairs=50, budget_s=7.0)
    assert len(out["kernel_s"]) == 4                       # 4.5 s of pairs 1-2, +2 s each


def test_decision_is_the_median_of_pair_ratios():
    record = decode_path.decision({"kernel_s": [1.0, 1.0, 2.0], "xla_s": [2.0, 0.5, 3.0]}, "k")
    assert record["speedup"] == 1.5 and record["path"] == "kernels"    # ratios 2, 0.5, 1.5
    assert record["key"] == "k" and record["cores"] == decode_path.cores()
    assert decode_path.valid(record, "k") and not decode_path.valid(record, "other")


@needs_kernel
def test_real_measurement_runs_each_path(monkeypatch):
    """The real measurement on a micro model: both paths traced (the kernels only for the
    kernel calls), and the configured choice is never asked (no recursion)."""
    assert cpu_kernels.available(), cpu_kernels._state.get("error")
    monkeypatch.setattr(decode_path, "choose", lambda *a, **k: pytest.fail("recursed"))
    traced = []
    real = cpu_kernels.decode_attention
    monkeypatch.setattr(cpu_kernels, "decode_attention",
                        lambda *a, **k: traced.append(1) or real(*a, **k))
    sampling._DECODE_JITS.clear()
    before = sampling.TRACE_COUNTS["decode"]
    out = decode_path.measure(sampling.generate, cfg=mcfg.micro(), batch=2, prompt_len=4,
                              new_tokens=8, pairs=1, max_pairs=1)
    sampling._DECODE_JITS.clear()
    assert sampling.TRACE_COUNTS["decode"] - before == 2                # one trace per path
    assert len(traced) == mcfg.micro().num_layers                       # the kernel trace only
    assert len(out["kernel_s"]) == len(out["xla_s"]) == 1
    assert all(t > 0 for t in out["kernel_s"] + out["xla_s"])
    assert jax.devices("cpu")
