"""A full disk, for real: small tmpfs mounts as the workdir and as TMPDIR (needs root, as CI
runs; skipped with the reason elsewhere).

* checkpoints: the run stops with one line naming the path and its free space (exit 4), the
  previous checkpoint stays whole, no half-written step is left, and `--resume` continues
  from it once there is room;
* metrics.jsonl never holds a torn line;
* the exported policy: a failed save leaves the previous export and no half directory;
* a generated program that fills its own sandbox fails alone; the next one runs.
"""

import asyncio
import errno
import gc
import json
import logging
import os
import pathlib
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_launch_scripts import make_standin_checkpoint  # noqa: E402

RUN = [sys.executable, str(ROOT / "experiments" / "run.py"), "--tasks=breast-cancer-diagnosis",
       "--sample_batch=2", "--max_in_flight=4", "--num_actors=1", "--max_new_tokens=16",
       "--max_prompt_tokens=1536", "--warm_pool=false", "--critic=shared",
       "--checkpoint_every=1", "--tensorboard=false", "--batch_size=2"]


class Tmpfs:
    def __init__(self, path: pathlib.Path, size: str):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'not root'}); the "
                        "full-disk tests need root, as CI has")

    def resize(self, size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


@pytest.fixture
def tmpfs(tmp_path):
    mounts = []

    def make(name: str, size: str) -> Tmpfs:
        m = Tmpfs(tmp_path / name, size)
        mounts.append(m)
        return m
    yield make
    for m in mounts:
        m.close()


def _run(args, env_extra, timeout=600):
    env = dict(os.environ, JAX_PLATFORMS="cpu", **env_extra)
    env.pop("XLA_FLAGS", None)
    return subprocess.run([*RUN, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _whole_lines(path: pathlib.Path) -> list:
    text = path.read_text()
    assert text == "" or text.endswith("\n"), "a torn last line"
    return [json.loads(line) for line in text.splitlines()]


def test_checkpoints_on_a_full_disk_stop_the_run_and_resume(tmp_path, tmpfs):
    policy = make_standin_checkpoint(tmp_path / "policy")
    fs = tmpfs("work", "5m")         # two or three checkpoints of the micro model fit
    work = fs.path / "run"
    env = {"MLE_RL_CACHE": str(tmp_path / "cache")}
    p = _run([f"--policy_dir={policy}", f"--workdir={work}", "--max_steps=6"], env)
    assert p.returncode == 4, p.stdout[-2000:] + p.stderr[-3000:]
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: no space left for checkpoint ") and str(work) in last
    assert "free of 5.0 MiB" in last and "--resume" in last
    names = sorted(os.listdir(work / "checkpoints"))
    steps = sorted(int(n) for n in names if n.isdigit())
    assert steps and f"checkpoint {steps[-1]} is intact" in last
    assert not [n for n in names if "tmp" in n]               # the half save was removed
    assert [r["step"] for r in _whole_lines(work / "metrics.jsonl")][:steps[-1]] == \
        list(range(1, steps[-1] + 1))
    fs.resize("40m")
    p = _run([f"--policy_dir={policy}", f"--workdir={work}", "--max_steps=6", "--resume"], env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert [r["step"] for r in _whole_lines(work / "metrics.jsonl")] == list(range(1, 7))
    assert (work / "policy" / "config.json").is_file()


def test_metrics_log_never_keeps_a_torn_line(tmpfs):
    from mle_rl.io import disk, metrics_log
    fs = tmpfs("metrics", "64k")
    logger = metrics_log.MetricsLogger(fs.path, tensorboard=False)
    big = {f"k{i:04d}": float(i) for i in range(200)}          # a few KiB per record
    with pytest.raises(disk.DiskFullError) as e:
        for step in range(1, 1000):
            logger.log(step, big)
    logger.close()
    rows = _whole_lines(fs.path / "metrics.jsonl")
    assert rows and [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    assert str(fs.path / "metrics.jsonl") in str(e.value) and "free of" in str(e.value)


def test_policy_export_on_a_full_disk_keeps_the_previous_one(tmp_path, tmpfs):
    from mle_rl.io import disk
    from mle_rl.models import config as mcfg, hf, qwen2
    fs = tmpfs("export", "600k")
    model = qwen2.init_model(mcfg.micro(), seed=0)
    first = hf.save(model, fs.path / "policy")           # ~430 KiB: fits once, not twice
    before = sorted(p.name for p in first.iterdir())
    with pytest.raises(OSError) as e:
        hf.save(model, fs.path / "policy")
    assert disk.is_disk_full(e.value)
    assert sorted(os.listdir(fs.path)) == ["policy"]          # no half-written directory
    assert sorted(p.name for p in first.iterdir()) == before
    assert hf.load(first) is not None


def test_a_program_that_fills_its_sandbox_fails_alone(tmp_path, tmpfs):
    fs = tmpfs("tmp", "3m")
    fill = tmp_path / "fill.py"
    fill.write_text("with open('big.bin', 'wb') as f:\n"
                    "    for _ in range(100):\n        f.write(b'x' * (1 << 20))\n")
    ok = tmp_path / "ok.py"
    ok.write_text("import pandas as pd\n"
                  "pd.read_csv('input/sample_submission.csv').to_csv('submission.csv', "
                  "index=False)\n")
    env = dict(os.environ, TMPDIR=str(fs.path), MLE_RL_CACHE=str(tmp_path / "cache"))
    out = {}
    for name, code in (("fill", fill), ("ok", ok)):
        r = subprocess.run([sys.executable, "-m", "mle_rl", "exec",
                            "--task=breast-cancer-diagnosis", f"--code={code}"], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        out[name] = json.loads(r.stdout)
    assert out["fill"]["status"] == "error" and out["fill"]["reward"] < -9
    assert "No space left on device" in out["fill"]["stderr_tail"]
    assert out["ok"]["status"] == "ok" and out["ok"]["score"] is not None
    deadline = time.time() + 30             # the janitor removes the work dirs after exit
    while [p for p in fs.path.iterdir() if p.name.startswith("mle_rl_")]:
        assert time.time() < deadline, list(fs.path.iterdir())
        time.sleep(0.2)


def _unretrieved_gather_failure(make_error) -> list:
    """Two writes gathered on a loop both fail; only the first failure is retrieved, so
    asyncio logs the other ("exception was never retrieved") when its future is collected,
    as orbax's save does on a full disk. Returns the asyncio records that got through."""
    async def write():
        await asyncio.sleep(0)
        raise make_error()

    async def save():
        parts = [asyncio.gather(write()) for _ in range(2)]
        try:
            for part in parts:         # the first failure ends the loop: the second is lost
                await part
        except Exception:  # noqa: BLE001
            pass
        await asyncio.sleep(0.01)

    logger = logging.getLogger("asyncio")     # a handler of its own: other tests in the same
    seen = []                                 # worker may have changed propagation or level

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record)
    handler, disabled, level = Keep(), logger.disabled, logger.level
    logger.addHandler(handler)
    logger.disabled = False
    logger.setLevel(logging.ERROR)
    try:
        asyncio.run(save())
        gc.collect()
    finally:
        logger.removeHandler(handler)
        logger.disabled, logger.level = disabled, level
    return seen


def test_unretrieved_full_disk_echoes_are_dropped_and_other_errors_pass(monkeypatch):
    from mle_rl.io import checkpoint, disk
    # Once a checkpoint read has failed in this process, the checkpointer drops every such
    # record (the echoes of the abandoned reads); an earlier test in this worker may have
    # done that, so this one starts from a process where no read has failed.
    monkeypatch.setitem(checkpoint._ABANDONED, "reads", False)
    disk.quiet_write_failures()
    full = lambda: OSError(errno.ENOSPC, "No space left on device")  # noqa: E731
    assert _unretrieved_gather_failure(full) == []
    other = _unretrieved_gather_failure(lambda: ValueError("a bug, not a full disk"))
    assert other and "exception was never retrieved" in other[0].getMessage()
