"""ActorPool: concurrency, FIFO queueing, crash / kill -9 / hang recovery, no orphans."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests import actor_work
from mle_rl.agent.actors import ActionDone, ActionRequest, ActorPool

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="uses /proc and Linux process groups"
)

WORK = f"{actor_work.__name__}:scripted_work"
TESTS_DIR = pathlib.Path(__file__).resolve().parent
REPO = TESTS_DIR.parent


def _request(i, record_dir=None, **meta):
    if record_dir is not None:
        meta["record_dir"] = str(record_dir)
    return ActionRequest(request_id=i, task_id="t", response="", policy_version=0,
                         nonce=f"n{i}", meta=meta)


def _collect(pool, n, timeout=60.0):
    """Polls until `n` ActionDones came back; fails the test after `timeout` s."""
    out, end = [], time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < end, f"only {len(out)} of {n} actions came back"
        out += pool.poll(timeout=0.5)
    return out


def _wait_record(record_dir, request_id, key="pid", timeout=30.0):
    path = pathlib.Path(record_dir) / f"{request_id}.json"
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists():
            data = json.loads(path.read_text())
            if key in data:
                return data
        time.sleep(0.02)
    raise AssertionError(f"request {request_id} never recorded {key!r}")


def _gone(pid):
    """True if `pid` no longer runs (absent, or a zombie nobody has reaped yet)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _wait_gone(pids, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end and not all(_gone(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


@pytest.fixture(scope="module")
def pool():
    with ActorPool(3, work_fn=WORK, preload=(), action_timeout_s=60.0) as p:
        yield p
    assert not _wait_gone(p.pids().values(), timeout=5.0)


def test_runs_actions_concurrently(pool, tmp_path):
    for i in range(3):
        pool.submit(_request(i, tmp_path, sleep=1.0))
    done = _collect(pool, 3)
    assert sorted(d.request.request_id for d in done) == [0, 1, 2]
    assert all(isinstance(d, ActionDone) and d.result.status == "ok" for d in done)
    records = [_wait_record(tmp_path, i, "end") for i in range(3)]
    assert len({r["pid"] for r in records}) == 3
    # All three ran at the same time: every one started before any finished.
    assert max(r["start"] for r in records) < min(r["end"] for r in records)
    assert all(d.result.duration_s == 1.0 and d.wall_s >= 1.0 for d in done)


def test_queues_when_busy_and_returns_each_action_once(pool, tmp_path):
    before = pool.stats()["actions_done"]
    for i in range(10, 18):
        pool.submit(_request(i, tmp_path, sleep=0.05))
    assert pool.in_flight() == 8
    done = _collect(pool, 8)
    assert sorted(d.request.request_id for d in done) == list(range(10, 18))
    assert pool.in_flight() == 0 and pool.poll() == []
    assert pool.stats()["actions_done"] == before + 8


def test_submit_wakes_a_poll_waiting_in_another_thread(pool):
    box = []
    poller = threading.Thread(target=lambda: box.append(pool.poll(timeout=60.0)))
    poller.start()
    time.sleep(0.2)  # the poll is now waiting with nothing in flight
    pool.submit(_request(40, sleep=0.0))
    poller.join(timeout=50.0)
    # Without the wake-up the request would sit in the queue until the 60 s poll ends.
    assert not poller.is_alive() and [d.request.request_id for d in box[0]] == [40]


def test_pool_dropped_without_close_takes_its_actors_with_it():
    pool = ActorPool(1, work_fn=WORK, preload=())
    pids = list(pool.pids().values())
    del pool
    gc.collect()
    assert not _wait_gone(pids, timeout=5.0)


def test_work_exception_returns_error_and_actor_survives(pool, tmp_path):
    pids_before = pool.pids()
    pool.submit(_request(20, tmp_path, mode="raise"))
    pool.submit(_request(21, tmp_path, mode="bad_return"))
    done = {d.request.request_id: d for d in _collect(pool, 2)}
    raised = done[20].result
    assert raised.status == "error" and raised.reward == -10.0
    assert "ValueError: boom from request 20" in raised.message
    assert raised.stderr_tail.startswith("Traceback") and "boom" in raised.stderr_tail
    assert done[21].result.status == "error"
    assert "returned str, not an ActionResult" in done[21].result.message
    assert pool.pids() == pids_before
    assert pool.stats()["failures"].get("exception") == 2


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_kill_9_mid_action_is_a_recorded_failure_and_actor_is_replaced(tmp_path, start_method):
    with ActorPool(2, work_fn=WORK, preload=(), start_method=start_method) as pool:
        pool.submit(_request(0, tmp_path, sleep=120))
        victim = _wait_record(tmp_path, 0)
        assert pool.running() == {0: victim["actor_id"]}
        os.kill(victim["pid"], signal.SIGKILL)
        (done,) = _collect(pool, 1)
        assert done.request.request_id == 0 and done.actor_id == victim["actor_id"]
        assert done.result.status == "error" and done.result.reward == -10.0
        assert done.result.message == (
            f"actor {victim['actor_id']} died (signal 9) during the action; replaced")
        new_pid = pool.pids()[victim["actor_id"]]
        assert new_pid != victim["pid"] and _gone(victim["pid"])
        stats = pool.stats()
        assert stats["actors_replaced"] == 1 and stats["failures"] == {"died": 1}
        # The run goes on: later actions run, on both actors, the new one included.
        for i in range(1, 5):
            pool.submit(_request(i, tmp_path, sleep=0.3))
        later = _collect(pool, 4)
        assert all(d.result.status == "ok" for d in later)
        assert new_pid in {_wait_record(tmp_path, i)["pid"] for i in range(1, 5)}
        assert pool.num_alive() == 2


def test_actor_exit_in_work_fn_is_reported_and_queue_stays_fifo(tmp_path):
    with ActorPool(1, work_fn=WORK, preload=(), failure_reward=-3.0) as pool:
        pool.submit(_request(0, tmp_path, mode="exit"))
        for i in range(1, 5):
            pool.submit(_request(i, tmp_path, sleep=0.0))
        done = {d.request.request_id: d for d in _collect(pool, 5)}
        assert done[0].result.message == "actor 0 died (exit code 3) during the action; replaced"
        assert done[0].result.reward == -3.0
        assert all(done[i].result.status == "ok" for i in range(1, 5))
        starts = [_wait_record(tmp_path, i)["start"] for i in range(5)]
        assert starts == sorted(starts)  # one actor: queued requests run in submission order


def test_actor_killed_before_it_is_ready_hands_its_action_to_the_next(tmp_path):
    with ActorPool(1, work_fn=WORK, preload=()) as pool:
        pool.submit(_request(0, tmp_path, sleep=0.0))  # sent down the new actor's pipe
        first = pool.pids()[0]
        os.kill(first, signal.SIGKILL)  # long before its imports are done
        (done,) = _collect(pool, 1)
        assert done.result.status == "ok"  # re-queued and run by the replacement
        assert _wait_record(tmp_path, 0)["pid"] == pool.pids()[0] != first
        assert pool.stats()["failures"] == {"start_failed": 1}


def test_hung_actor_is_killed_after_its_limit_and_replaced(tmp_path):
    limit = lambda request: request.meta.get("limit", 30.0)  # noqa: E731 (stays in parent)
    with ActorPool(1, work_fn=WORK, preload=(), action_timeout_s=limit, hang_margin_s=0.5,
                   work_kwargs={"reward_scheme": "mlagent"}) as pool:
        pool.submit(_request(0, tmp_path, sleep=600, limit=0.5, mode="grandchild"))
        pool.submit(_request(1, tmp_path, sleep=0.0))
        record = _wait_record(tmp_path, 0, "grandchild")
        hung_pid = record["pid"]
        done = {d.request.request_id: d for d in _collect(pool, 2)}
        result = done[0].result
        assert result.status == "timeout" and result.reward == 0.5  # mlagent: corner case
        assert re.fullmatch(
            r"actor 0 did not answer within [\d.]+ s \(action limit 0.5 s \+ margin 0.5 s\); "
            r"killed and replaced", result.message), result.message
        # Not declared hung before limit + margin (that it was killed, not left to finish
        # its 600 s, is the "timeout" status above).
        assert done[0].wall_s >= 1.0
        assert done[1].result.status == "ok"
        assert _gone(hung_pid) and pool.pids()[0] != hung_pid
        # What the actor started (a sandbox, here `sleep`) went with it.
        assert not _wait_gone([record["grandchild"]], timeout=5.0)
        assert pool.stats()["failures"] == {"hung": 1}


def test_close_returns_unfinished_and_leaves_no_processes(tmp_path):
    pool = ActorPool(2, work_fn=WORK, preload=())
    pool.submit(_request(0, tmp_path, sleep=600))
    pool.submit(_request(1, tmp_path, sleep=600))
    pool.submit(_request(2, tmp_path, sleep=600))
    _wait_record(tmp_path, 0)
    _wait_record(tmp_path, 1)
    pids = list(pool.pids().values())
    unfinished = pool.close(timeout=2.0)
    assert sorted(r.request_id for r in unfinished) == [0, 1, 2]
    assert not _wait_gone(pids, timeout=0.5)  # close() joined them: gone already
    assert all(not pathlib.Path(f"/proc/{p}").exists() for p in pids)
    assert pool.close() == []  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(_request(3))


def _default_sigint():
    """In the parent script's process, before exec: SIGINT unblocked and at its default, as
    a trainer started from a shell has it. (In some full test runs the parent ignored
    SIGINT: a disposition or mask inherited from the test process, not from the pool.)"""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig,started_from", [
    (signal.SIGKILL, "main"), (signal.SIGKILL, "thread"), (signal.SIGINT, "main")])
def test_parent_death_leaves_no_orphan_actors(sig, started_from):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    parent = subprocess.Popen(
        [sys.executable, str(TESTS_DIR / "actor_work.py"), "2", started_from],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=_default_sigint)
    try:
        line = parent.stdout.readline()
        assert line, f"the parent script printed nothing; stderr: {parent.stderr.read()}"
        report = json.loads(line)
        pids = report["pids"]
        assert len(pids) == 2 and not any(_gone(p) for p in pids)
        # Spawn did not re-run the parent's script in the actors (a trainer's would
        # import JAX in each one).
        assert report["actor_main_file"] == "None"
        time.sleep(0.5)          # the parent is in its poll loop, as a trainer would be
        parent.send_signal(sig)
        try:
            parent.wait(timeout=20)
        except subprocess.TimeoutExpired:
            status = pathlib.Path(f"/proc/{parent.pid}/status").read_text()
            masks = [ln for ln in status.splitlines() if ln.startswith(("SigBlk", "SigIgn"))]
            parent.send_signal(signal.SIGUSR1)   # faulthandler: every thread's stack
            time.sleep(1.0)
            parent.kill()
            pytest.fail(f"the parent did not exit within 20 s of the signal ({masks}); its "
                        f"stderr, with its threads' stacks:\n{parent.communicate()[1][-6000:]}")
        assert not _wait_gone(pids, timeout=10.0), "actors outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="'package.module:function'"):
        ActorPool(1, work_fn="no_colon_here")
    with pytest.raises(ValueError, match="made_up"):
        ActorPool(1, work_fn=WORK, work_kwargs={"reward_scheme": "made_up"})
    with pytest.raises(ValueError, match="num_actors"):
        ActorPool(0, work_fn=WORK)
    pool = ActorPool(1, work_fn="no_such_module_xyz:f", preload=())
    with pytest.raises(RuntimeError, match="could not load the work function"):
        pool.poll(timeout=30.0)
    assert pool.close() == []


_HAS_ACTION = importlib.util.find_spec("mle_rl.env.action") is not None
_needs_action = pytest.mark.skipif(not _HAS_ACTION, reason="mle_rl.env.action is not written yet")

SOLVE = ("Threshold x at zero.\n\n```python\nimport pandas as pd\n"
         "test = pd.read_csv('input/test.csv')\ntest['label'] = (test['x'] > 0).astype(int)\n"
         "test[['id', 'label']].to_csv('submission.csv', index=False)\nprint('done')\n```\n")
WAIT = "Wait.\n\n```python\nimport time\nprint('started', flush=True)\ntime.sleep(120)\n```\n"


def _descendants(pid):
    """Pids of every live process below `pid`, from /proc."""
    children = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


@pytest.fixture(scope="module")
def real_pool(tmp_path_factory):
    """One actor running the default work function (real run_action, a warm sandbox)
    on a tiny task written to a tmp dir."""
    root = tmp_path_factory.mktemp("mlebench")
    actor_work.write_tiny_task(root / "tiny")
    kwargs = {"mlebench_dir": str(root), "task_factory": f"{actor_work.__name__}:tiny_task",
              "reward_scheme": "rl4mle", "instrumenter": "ast",
              "warm_pool": {"size": 1, "preload": ("pandas",)}}
    pool = ActorPool(1, work_kwargs=kwargs, action_timeout_s=60.0)
    yield pool
    actor_pid = pool.pids()[0]
    processes = [actor_pid] + _descendants(actor_pid)
    pool.close()
    assert not _wait_gone(processes, timeout=5.0), "close() left actor or sandbox processes"


@_needs_action
def test_default_work_runs_a_real_action_in_the_sandbox(real_pool):
    real_pool.submit(ActionRequest(0, "tiny", SOLVE, policy_version=0, nonce="x"))
    real_pool.submit(ActionRequest(1, "tiny", "no code at all", policy_version=0, nonce="y"))
    done = {d.request.request_id: d.result for d in _collect(real_pool, 2, timeout=120)}
    assert done[0].status == "ok" and done[0].score == 1.0, done[0]
    assert done[0].reward == 1.0 and done[0].duration_s > 0
    assert done[1].status == "no_code" and done[1].reward == -10.0


@_needs_action
def test_kill_9_of_an_actor_running_a_real_sandbox(real_pool):
    real_pool.submit(ActionRequest(2, "tiny", WAIT, policy_version=0, nonce="k"))
    actor_pid, end = real_pool.pids()[0], time.monotonic() + 60
    while real_pool.running() != {2: 0} or len(_descendants(actor_pid)) < 2:
        assert time.monotonic() < end, "the sandbox never started"
        assert real_pool.poll(timeout=0.2) == []
    time.sleep(0.5)  # let the program start inside its sandbox
    sandbox_pids = _descendants(actor_pid)
    os.kill(actor_pid, signal.SIGKILL)
    (done,) = _collect(real_pool, 1)
    assert done.result.status == "error" and done.result.reward == -10.0
    assert done.result.message == "actor 0 died (signal 9) during the action; replaced"
    assert not _wait_gone(sandbox_pids, timeout=10.0), "a sandbox outlived its actor"
    real_pool.submit(ActionRequest(3, "tiny", SOLVE, policy_version=0, nonce="m"))
    (after,) = _collect(real_pool, 1, timeout=120)
    assert after.result.status == "ok" and after.result.score == 1.0
    assert real_pool.pids()[0] != actor_pid
