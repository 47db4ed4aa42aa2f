"""kill -9 of experiments/run.py at random (seeded) moments, then --resume.

What must hold after every kill: the run resumes from the latest intact step; every listed
step restores; metrics.jsonl has each step once, with no gap; within a few seconds no
process of the run is left (children of the killed pid, or anything whose command line or
environment names the run's workdir or TMPDIR) and nothing of it is left in its TMPDIR.
A corrupt latest step fails `--resume` with one line on stderr, and following its advice
(`--resume_step=L-1`) moves step L aside and writes it again. Two Checkpointer-only tests
kill a save while it deletes an old step, and check that a failed restore prints no echoes.

The run is the trainer tests' tiny one (a random `micro` policy), started as
`experiments/run.py` with one change (`_LAUNCH`): each action runs a short failing program
in a real sandbox instead of the random response (which holds no code), so that sandbox
work dirs exist, and are being used, when the run is killed. A save is "in flight" while
`DIR/checkpoints/<step>.orbax-checkpoint-tmp*` exists (about 0.3 s here); the test polls
for it, and never opens a Checkpointer while a run is alive (that would clean up the live
run's temp directories).
"""

import dataclasses
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from mle_rl.io import metrics_log as ml      # light: actors import this module (below)

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUN_PY = str(ROOT / "experiments" / "run.py")
COMMON = [
    "--tasks=breast-cancer-diagnosis", "--policy_dir=random", "--model_preset=micro",
    "--batch_size=4", "--sample_batch=4", "--max_in_flight=4", "--num_actors=2",
    "--critic=shared", "--max_new_tokens=24", "--max_prompt_tokens=1536",
    "--checkpoint_every=1", "--keep_checkpoints=2", "--warm_pool=false", "--tensorboard=false",
    "--actor_lr=1e-3", "--critic_lr=1e-3",
]
GRACE_S = 5.0          # how long a killed run's processes and temp files may outlive it
# A program that runs in its sandbox and fails: no solution enters the archive, so prompts
# (and the compiled shapes) stay those of the trainer tests.
PROGRAM = "Fail on purpose.\n```python\nimport sys\nprint('loaded the data')\nsys.exit(1)\n```\n"


def sandboxed_work(request, ctx):
    """The actors' work in these runs: the real environment, on `PROGRAM`."""
    from mle_rl.agent import actor_process

    return actor_process.default_work(dataclasses.replace(request, response=PROGRAM), ctx)


_LAUNCH = f"""
import runpy, sys
from mle_rl.runtime import allocator
allocator.reexec_with_tcmalloc()       # as run.py does, before the imports below
from mle_rl.agent import trainer

class Trainer(trainer.Trainer):        # run.py, with actors running `sandboxed_work`
    def __init__(self, cfg, log=print):
        super().__init__(cfg, log, work_fn="tests.test_crash_safety:sandboxed_work")

trainer.Trainer = Trainer
sys.argv = [{RUN_PY!r}, *sys.argv[1:]]
runpy.run_path({RUN_PY!r}, run_name="__main__")
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


class Run:
    """One workdir and one TMPDIR, shared by the successive processes of a run."""

    def __init__(self, tmp_path, cache):
        self.wd, self.tmp = tmp_path / "run", tmp_path / "tmp"
        self.ckpt = self.wd / "checkpoints"
        self.tmp.mkdir()
        self.env = dict(os.environ, MLE_RL_CACHE=str(cache), JAX_PLATFORMS="cpu",
                        TMPDIR=str(self.tmp), PYTHONPATH=str(ROOT))
        self.env.pop("XLA_FLAGS", None)
        self.n = 0

    def copy(self, tmp_path):
        """The same run continued elsewhere: a copy of its workdir, a fresh TMPDIR."""
        other = Run(tmp_path, pathlib.Path(self.env["MLE_RL_CACHE"]))
        shutil.copytree(self.wd, other.wd, symlinks=True)
        return other

    def start(self, *args):
        """Starts run.py; its stdout goes to `out`, its stderr to `err` (files, not pipes)."""
        self.n += 1
        self.out = self.wd.parent / f"out{self.n}.txt"
        self.err = self.wd.parent / f"err{self.n}.txt"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            return subprocess.Popen(
                [sys.executable, "-c", _LAUNCH, *COMMON, f"--workdir={self.wd}", *args],
                cwd=ROOT, env=self.env, stdout=out, stderr=err)

    def finish(self, proc, timeout=300):
        proc.wait(timeout=timeout)
        self.assert_nothing_left(set())
        return proc.returncode, self.out.read_text(), self.err.read_text()

    # -- what the test sees of a live run (plain directory listings) -----------------------
    def names(self):
        try:
            return os.listdir(self.ckpt)
        except FileNotFoundError:
            return []

    def committed(self):
        return sorted(int(n) for n in self.names() if n.isdigit())

    def saving(self):
        return any(".orbax-checkpoint-tmp" in n for n in self.names())

    def metric_steps(self):
        return [r["step"] for r in ml.read_metrics(self.wd / "metrics.jsonl")]

    # -- kill -9 and its aftermath ---------------------------------------------------------
    def kill(self, proc, until, rng, *, timeout=240, jitter_s=0.1):
        """SIGKILLs `proc` `rng.uniform(0, jitter_s)` s after `until()` first holds; returns
        what was there just before the kill: (checkpoint dir entries, whether a save was in
        flight, the run's temp dirs in TMPDIR)."""
        t0 = time.monotonic()
        while not until():
            assert proc.poll() is None, f"run ended early:\n{self.err.read_text()[-3000:]}"
            assert time.monotonic() - t0 < timeout, "the moment to kill never came"
            time.sleep(0.005)
        time.sleep(rng.uniform(0, jitter_s))
        family = _descendants(proc.pid)
        before = sorted(self.names()), self.saving(), self.temp_files()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        self.assert_nothing_left(family)
        return before

    def leftovers(self, family):
        """Live processes of the run: `family` (pids seen under it), or any process whose
        command line or environment mentions its workdir or TMPDIR."""
        marks = (str(self.wd), str(self.tmp))
        found = []
        for p in psutil.process_iter(["pid", "cmdline", "environ", "status"]):
            info = p.info
            if info["pid"] == os.getpid() or info["status"] == psutil.STATUS_ZOMBIE:
                continue
            text = " ".join(info["cmdline"] or []) + " " + " ".join(
                f"{k}={v}" for k, v in (info["environ"] or {}).items())
            if info["pid"] in family or any(m in text for m in marks):
                found.append(f"{info['pid']} {' '.join(info['cmdline'] or [])[:200]}")
        return found

    def assert_nothing_left(self, family):
        deadline = time.monotonic() + GRACE_S
        while self.leftovers(family) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not self.leftovers(family), "processes outlived the run"
        while self.temp_files() and time.monotonic() < deadline:
            time.sleep(0.1)
        # Sandbox work dirs: TMPDIR/mle_rl_<pid>_*/ (janitor roots) or older mle_rl_job_*.
        assert not self.temp_files(), f"left in the run's TMPDIR: {self.temp_files()}"

    def temp_files(self):
        return sorted(n for n in os.listdir(self.tmp) if n.startswith("mle_rl_"))

    def check_intact(self):
        """After the run died: every listed step restores, metrics.jsonl is 1..n with n at
        least the latest step; returns the latest step (None if none)."""
        from mle_rl.io.checkpoint import Checkpointer

        c = Checkpointer(self.ckpt)
        steps = c.all_steps()
        assert [c.verify(s) for s in steps] == steps
        c.close()
        metrics = self.metric_steps()
        assert metrics == list(range(1, len(metrics) + 1)), metrics
        latest = steps[-1] if steps else None
        assert len(metrics) >= (latest or 0), (metrics, steps)
        return latest


def _descendants(pid):
    try:
        return {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return {pid}


def _corrupt(step_dir):
    for d, _, files in os.walk(step_dir / "train_state"):
        if os.path.basename(d) == "d":
            for f in files:
                os.truncate(os.path.join(d, f), 10)


def _assert_resumed_at(text, step):
    assert f"[resume] continuing at update {step} from" in text, text[-3000:]


# ---------------------------------------------------------------- the Checkpointer alone

_KILLED_DELETE = textwrap.dedent("""
    import os, sys, time, types
    import jax
    from mle_rl.io import checkpoint as ck

    c = ck.Checkpointer(sys.argv[1], keep=2)
    state = {"w": jax.numpy.arange(1 << 16, dtype=jax.numpy.float32)}
    c.save(1, state, {})
    c.save(2, state, {})

    def hang(path, ignore_errors=False):   # deletes half of the old step, then is killed
        files = sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)
        for f in files[: len(files) // 2]:
            os.remove(f)
        print("DELETING", os.path.basename(path), flush=True)
        time.sleep(600)

    ck.shutil = types.SimpleNamespace(rmtree=hang)
    c.save(3, state, {})                   # committed; step 1 is now being deleted
""")


def test_kill_while_an_old_step_is_deleted_never_lists_it(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_DELETE, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line == "DELETING 1", (line, proc.stderr.read()[-2000:] if not line else "")
        assert sorted(os.listdir(tmp_path)) == [".trash", "2", "3"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    from mle_rl.io.checkpoint import Checkpointer

    c = Checkpointer(tmp_path, keep=2)
    assert c.all_steps() == [2, 3] and os.listdir(tmp_path / ".trash") == []
    assert [c.verify(s) for s in c.all_steps()] == [2, 3]
    c.close()


_CORRUPT_RESTORE = textwrap.dedent("""
    import os, sys
    import jax
    from mle_rl.io import checkpoint as ck

    d = sys.argv[1]
    state = {f"w{i}": jax.numpy.full((4096, 64), float(i)) for i in range(40)}
    c = ck.Checkpointer(d)
    c.save(1, state, {})
    for root, _, files in os.walk(os.path.join(d, "1", "train_state")):
        if os.path.basename(root) == "d":
            for f in files:
                os.truncate(os.path.join(root, f), 10)
    for _ in range(5):      # each failed read may leave tensorstore reads in flight
        try:
            ck.Checkpointer(d).restore(abstract_state=state)
        except ck.CheckpointError as e:
            print("error:", str(e)[:40], file=sys.stderr)
""")


def test_a_failed_restore_prints_no_event_loop_tracebacks(tmp_path):
    """Orbax closes its event loop while other reads of a failed restore are in flight;
    their echoes ('Event loop is closed', ...) must not bury the one error line."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    r = subprocess.run([sys.executable, "-c", _CORRUPT_RESTORE, str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    want = "error: " + f"checkpoint 1 in {tmp_path}"[:40]
    assert r.stderr.splitlines() == [want] * 5, r.stderr[-3000:]


# ---------------------------------------------------------------- run.py

@pytest.fixture(scope="module")
def killed_mid_save(tmp_path_factory, cache):
    """A run killed with SIGKILL while checkpoint k (3 or 4, seeded) or a later one was
    being written, checked; each test continues a copy of it."""
    rng = random.Random(20251201)
    run = Run(tmp_path_factory.mktemp("killed"), cache)
    k = rng.choice([3, 4])
    proc = run.start("--max_steps=100")
    names, in_flight, temp = run.kill(
        proc, lambda: len(run.metric_steps()) >= k and run.saving(), rng)
    assert temp, "no sandbox had run: the TMPDIR check above proved nothing"
    latest = run.check_intact()
    assert latest is not None and latest >= k - 1, (latest, names, in_flight)
    return run, latest


def test_kill9_mid_save_then_resume_continues_from_the_latest_step(killed_mid_save, tmp_path):
    run, latest = killed_mid_save
    run = run.copy(tmp_path)
    rc, out, err = run.finish(run.start("--resume", f"--max_steps={latest + 1}"))
    assert rc == 0, err[-3000:]
    _assert_resumed_at(out, latest)
    assert run.check_intact() == latest + 1
    assert run.metric_steps() == list(range(1, latest + 2))


def test_corrupt_latest_step_is_one_line_and_its_advice_works(killed_mid_save, tmp_path):
    run, latest = killed_mid_save
    run = run.copy(tmp_path)
    _corrupt(run.ckpt / str(latest))
    # One clear line on stderr, exit 2, no traceback (orbax's abandoned reads are silent).
    rc, out, err = run.finish(run.start("--resume", f"--max_steps={latest + 1}"))
    assert rc == 2, err[-3000:]
    assert len(err.splitlines()) == 1 and err.startswith(
        f"error: checkpoint {latest} in {run.ckpt} is incomplete or corrupt ("), err[-3000:]
    assert err.rstrip().endswith(f"; delete {run.ckpt}/{latest} or pass "
                                 f"--resume_step={latest - 1}."), err
    # Following its advice moves step `latest` aside (one warning line) and writes it again,
    # so a plain --resume works afterwards.
    rc, out, err = run.finish(run.start(f"--resume_step={latest - 1}",
                                        f"--max_steps={latest + 1}"))
    assert rc == 0, err[-3000:]
    _assert_resumed_at(out, latest - 1)
    (warning,) = [line for line in out.splitlines() if "warning" in line]
    discarded = [n for n in run.names() if n.startswith("discarded-")]
    assert len(discarded) == 1 and f"{run.ckpt / discarded[0]}" in warning, warning
    assert os.listdir(run.ckpt / discarded[0]) == [str(latest)]
    assert run.check_intact() == latest + 1 and run.committed() == [latest, latest + 1]
    assert run.metric_steps() == list(range(1, latest + 2))


@pytest.mark.slow
def test_many_kills_at_random_moments_then_resume_to_the_end(tmp_path, cache):
    rng = random.Random(57)
    run = Run(tmp_path, cache)
    moments = ["save", "after_commit", "startup", "anytime", "save", "after_commit",
               "save", "anytime"]
    rng.shuffle(moments)
    latest = None
    for moment in moments:
        before, logged = run.committed(), max(run.metric_steps(), default=0)
        proc = run.start(*(["--resume"] if latest is not None else []), "--max_steps=1000")
        t0 = time.monotonic()
        if moment == "startup":        # importing, building the model, restoring
            wait_s = rng.uniform(1.0, 12.0)
            until, jitter = (lambda: time.monotonic() - t0 > wait_s), 0.0
        elif moment == "save":
            target = logged + rng.randint(1, 2)
            until, jitter = (lambda: max(run.metric_steps(), default=0) >= target
                             and run.saving()), 0.15
        elif moment == "after_commit":  # while an old step is being deleted
            target = (latest or 0) + rng.randint(2, 3)
            until, jitter = (lambda: max(run.committed(), default=0) >= target), 0.02
        else:                           # any time in the next few seconds of training
            target = logged + 1
            until, jitter = (lambda: max(run.metric_steps(), default=0) >= target), 3.0
        run.kill(proc, until, rng, jitter_s=jitter)
        if latest is not None and "[resume]" in run.out.read_text():
            _assert_resumed_at(run.out.read_text(), latest)
        latest = run.check_intact()
        assert not before or latest >= before[-1], (moment, before, latest)
    end = (latest or 0) + 2
    rc, out, err = run.finish(run.start(*(["--resume"] if latest is not None else []),
                                        f"--max_steps={end}"))
    assert rc == 0, err[-3000:]
    if latest is not None:
        _assert_resumed_at(out, latest)
    assert run.check_intact() == end and run.metric_steps() == list(range(1, end + 1))
    assert json.loads((run.wd / "summary.json").read_text())["updates"] == end
