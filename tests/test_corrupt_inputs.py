"""Corrupt inputs on the loading paths of `experiments/run.py`: each is refused with one line
naming the file and what to do, exit status 2, and nothing in the workdir is overwritten.

A truncated `model.safetensors`, a `tokenizer.json` that is not JSON, a `warmstart.json`
from another version of the warm start, and a checkpoint whose host state was made with
another batch size or group size.
"""

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_launch_scripts import make_standin_checkpoint  # noqa: E402

RUN = [sys.executable, str(ROOT / "experiments" / "run.py"), "--tasks=breast-cancer-diagnosis",
       "--sample_batch=2", "--max_in_flight=4", "--num_actors=1", "--max_new_tokens=16",
       "--max_prompt_tokens=1536", "--warm_pool=false", "--critic=shared",
       "--checkpoint_every=1", "--tensorboard=false", "--batch_size=2"]


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return make_standin_checkpoint(tmp_path_factory.mktemp("good") / "ckpt")


def _run(args, cache, timeout=600):
    env = dict(os.environ, MLE_RL_CACHE=str(cache), JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    return subprocess.run([*RUN, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _digest(root: pathlib.Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _refused(proc, *needles):
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    for n in needles:
        assert n in last, (n, last)
    return last


def _copy(good, tmp_path, name):
    dst = tmp_path / name
    shutil.copytree(good, dst)
    return dst


def test_truncated_weights_and_broken_tokenizer(good, tmp_path):
    bad = _copy(good, tmp_path, "truncated")
    f = bad / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    last = _refused(_run([f"--policy_dir={bad}", f"--workdir={tmp_path / 'w1'}", "--max_steps=1"],
                         tmp_path / "cache"), str(f), "truncated")
    assert "copy the checkpoint again" in last
    bad = _copy(good, tmp_path, "tokenizer")
    (bad / "tokenizer.json").write_text("{not json")
    last = _refused(_run([f"--policy_dir={bad}", f"--workdir={tmp_path / 'w2'}", "--max_steps=1"],
                         tmp_path / "cache"), str(bad / "tokenizer.json"))
    assert "copy the tokenizer files again" in last
    for w in ("w1", "w2"):          # refused before anything was written there
        assert not (tmp_path / w / "metrics.jsonl").exists()


def test_warmstart_record_of_another_version(good, tmp_path):
    bad = _copy(good, tmp_path, "other_version")
    (bad / "warmstart.json").write_text(json.dumps({"format": 99, "settings": {}}))
    last = _refused(_run([f"--policy_dir={bad}", f"--workdir={tmp_path / 'w'}", "--max_steps=1"],
                         tmp_path / "cache"), str(bad / "warmstart.json"), "format 99")
    assert "warm_start.py" in last
    assert json.loads((bad / "warmstart.json").read_text())["format"] == 99   # left as it was


@pytest.mark.parametrize("change, field", [
    ("--batch_size=4", "buffer.batch_size"),
    # out of CI for its time (a run of one update and a refused start, ~30 s on 2 cores):
    # the refusal is the same code path as the batch size's, and the field's place among
    # the settings a resume must match is checked in tests/test_trainer.py
    pytest.param("--group_size=2", "buffer.group_size", marks=pytest.mark.slow)])
def test_checkpoint_made_with_other_batches(good, tmp_path, change, field):
    """A resume with another batch or group size is refused before anything is written: one
    run of one update, then a start with the change on a copy of its workdir."""
    first = _run([f"--policy_dir={good}", f"--workdir={tmp_path / 'first'}", "--max_steps=1"],
                 tmp_path / "cache")
    assert first.returncode == 0, first.stderr[-3000:]
    work = _copy(tmp_path / "first", tmp_path, field)
    before = _digest(work)
    args = [change, f"--policy_dir={good}", f"--workdir={work}", "--max_steps=2", "--resume"]
    _refused(_run(args, tmp_path / "cache"), str(work / "checkpoints"), field,
             "start a new workdir")
    assert _digest(work) == before          # checkpoints, metrics and policy untouched
