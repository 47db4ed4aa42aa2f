"""Hostile programs are contained: each ends with a clear status and the failure reward,
nothing it started is left running, it writes nothing outside its working directory, and
the private answers never reach its output.

Every program first tries to write files at host paths (`ESCAPE`), which must not exist
afterwards. `Watch` learns the sandbox's uid from its working dir's owner and records how
many processes that uid ever had, then checks that none is left.
"""

import os
import pathlib
import secrets
import socket
import threading
import time

import psutil
import pytest

from tests._tiny_task import SECRET, make_tiny_task
from mle_rl.env import action, cgroups, rewards, sandbox

FAIL = rewards.FAILURE_REWARD
CGROUP = cgroups.detect() is not None


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return make_tiny_task(tmp_path_factory.mktemp("hostile"))


def _escape_paths(task, tmp_path):
    tag = secrets.token_hex(4)
    return [str(tmp_path / f"escaped-{tag}"), f"/tmp/mle_rl_escaped_{tag}",
            f"/work/main/escaped_{tag}", f"/root/escaped_{tag}",
            str(task.private_dir / f"escaped_{tag}"), str(task.public_dir / f"escaped_{tag}"),
            f"input/escaped_{tag}"]


def _prefix(paths):
    return f"""\
import os, sys
for _p in {paths!r}:
    try:
        os.makedirs(os.path.dirname(_p) or ".", exist_ok=True)
        with open(_p, "w") as _f:
            _f.write("escaped")
    except Exception:
        pass
"""


class Watch:
    """Polls the workdir's owner (the sandbox uid) and counts that uid's processes."""

    def __init__(self, workdir: pathlib.Path):
        self.workdir, self.uid, self.peak = workdir, None, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            if self.uid is None:
                try:
                    owner = self.workdir.stat().st_uid
                    if owner != os.geteuid():
                        self.uid = owner
                except FileNotFoundError:
                    pass
            if self.uid is not None:
                self.peak = max(self.peak, len(_procs_of(self.uid)))
            time.sleep(0.02)

    def stop(self):
        self._stop.set()
        self._t.join()


def _procs_of(uid, marker=None):
    out = []
    for p in psutil.process_iter(["uids", "cmdline"]):
        try:
            if (uid is not None and p.info["uids"] and p.info["uids"].real == uid) or (
                    marker and marker in " ".join(p.info["cmdline"] or ())):
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def _run(task, tmp_path, body, *, marker=None, **kw):
    paths = _escape_paths(task, tmp_path)
    workdir = tmp_path / f"work-{secrets.token_hex(3)}"
    watch = Watch(workdir)
    kw.setdefault("timeout_s", 10)  # generous: only the time-limit tests rely on it
    kw.setdefault("memory_mb", 1024)
    try:
        res = action.run_code(task, _prefix(paths) + body, instrumenter=None, workdir=workdir,
                              **kw)
    finally:
        watch.stop()
    assert not workdir.exists(), "the working directory was not removed"
    if os.geteuid() == 0 and sandbox.use_bwrap():
        assert watch.uid is not None, "the sandbox did not run as its own uid"
    assert _procs_of(watch.uid, marker) == [], "a process of the sandbox is still running"
    for p in paths:
        host = p if os.path.isabs(p) else str(task.public_dir / os.path.basename(p))
        assert not os.path.exists(host), f"the program wrote {host} on the host"
    assert SECRET not in res.stdout_tail + res.stderr_tail
    assert res.reward == FAIL
    return res, watch


def test_read_private_answers_by_path(task, tmp_path):
    res, _ = _run(task, tmp_path, f"""
for p in [{str(task.private_dir / 'answers.csv')!r}, "../private/answers.csv",
          "input/../private/answers.csv", {str(task.root)!r} + "/private/answers.csv"]:
    try:
        print(open(p).read())
    except OSError as e:
        print("blocked", p, type(e).__name__)
sys.exit(1)
""")
    assert res.status == "error"
    assert "blocked" in res.stdout_tail


def test_search_file_system_for_answers(task, tmp_path):
    res, _ = _run(task, tmp_path, """
found = []
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys"):
        dirs[:] = []
        continue
    for f in files:
        if f.startswith("answers") or f == "description.md":
            found.append(os.path.join(root, f))
for f in found:
    try:
        print("FOUND", f, open(f).read()[:200])
    except OSError:
        print("FOUND-UNREADABLE", f)
print("searched")
sys.exit(1)
""", timeout_s=60)
    assert res.status == "error"
    assert "searched" in res.stdout_tail and "FOUND" not in res.stdout_tail


def test_read_answers_via_proc(task, tmp_path):
    priv = str(task.private_dir / "answers.csv")
    res, _ = _run(task, tmp_path, f"""
pids = ["self", "1"] + [d for d in os.listdir("/proc") if d.isdigit()]
tries = []
for pid in pids:
    tries += [f"/proc/{{pid}}/root{priv}", f"/proc/{{pid}}/cwd/../private/answers.csv",
              f"/proc/{{pid}}/cwd/input/../../private/answers.csv", f"/proc/{{pid}}/environ"]
mounts = open("/proc/self/mountinfo").read()
for line in mounts.splitlines():
    host = line.split()[3]
    if host.endswith("/public"):
        tries += [f"/proc/1/root{{host}}/../private/answers.csv", host + "/../private/answers.csv"]
for t in tries:
    try:
        print(t, open(t, errors="replace").read()[:300])
    except OSError:
        pass
print("tried", len(tries))
sys.exit(1)
""")
    assert res.status == "error"
    assert "tried" in res.stdout_tail


def test_network_connection(task, tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.setblocking(False)
    port = srv.getsockname()[1]
    try:
        res, _ = _run(task, tmp_path, f"""
import socket
for host, port in [("127.0.0.1", {port}), ("1.1.1.1", 80), ("8.8.8.8", 53)]:
    try:
        socket.create_connection((host, port), timeout=1).close()
        print("CONNECTED", host)
    except OSError as e:
        print("no network", host, type(e).__name__)
try:
    socket.getaddrinfo("example.com", 80)
    print("CONNECTED dns")
except OSError:
    print("no dns")
sys.exit(1)
""")
        with pytest.raises(BlockingIOError):
            srv.accept()
    finally:
        srv.close()
    assert res.status == "error"
    assert "CONNECTED" not in res.stdout_tail and "no network 127.0.0.1" in res.stdout_tail


def test_infinite_loop(task, tmp_path):
    res, _ = _run(task, tmp_path, "while True:\n    pass\n", timeout_s=2)
    assert res.status == "timeout"


def test_sleep_past_the_limit(task, tmp_path):
    res, _ = _run(task, tmp_path, "import time\ntime.sleep(600)\n", timeout_s=2)
    assert res.status == "timeout"
    assert res.duration_s < 30


def test_fork_bomb(task, tmp_path):
    res, watch = _run(task, tmp_path, """
while True:
    try:
        os.fork()
    except OSError:
        pass
""", timeout_s=3, sandbox_kw={"max_procs": 32})
    assert res.status == "timeout"
    if os.geteuid() != 0 or not sandbox.use_bwrap():
        pytest.skip("the process cap is measured only as root under bubblewrap")
    assert 1 < watch.peak <= 40, f"{watch.peak} processes: the fork bomb was not capped"


def test_allocate_50_gb(task, tmp_path):
    # One 50 GB request: the kernel refuses it at once (MemoryError, an error) or, where
    # it overcommits, the cgroup kills the program while it fills the pages (oom).
    res, _ = _run(task, tmp_path, "x = bytearray(50 * 2**30)\n")
    assert res.status in (("error", "oom") if CGROUP else ("error",))
    # Memory touched 100 MB at a time: the cgroup's OOM kill, the sandbox's own verdict;
    # with rlimits only the program's MemoryError, which the sandbox does not trust.
    res, _ = _run(task, tmp_path, """
import numpy as np
chunks = []
while True:
    chunks.append(np.ones(100 * 2**20 // 8))
""", memory_mb=768, timeout_s=30)
    assert res.status == ("oom" if CGROUP else "error")


def test_write_huge_file(task, tmp_path):
    res, _ = _run(task, tmp_path, """
chunk = b"x" * 2**20
with open("big.bin", "wb") as f:
    for _ in range(50_000):
        f.write(chunk)
""", sandbox_kw={"max_file_mb": 8})
    assert res.status == "error"
    assert "File too large" in res.stderr_tail or "EFBIG" in res.stderr_tail


def test_print_gigabytes(task, tmp_path):
    res, _ = _run(task, tmp_path, """
line = "y" * (2**20 - 1) + "\\n"
while True:
    sys.stdout.write(line)
""", timeout_s=2, sandbox_kw={"max_output_bytes": 4096})
    assert res.status == "timeout"
    assert 0 < len(res.stdout_tail) <= 4096


def test_daemon_outliving_the_program(task, tmp_path):
    marker = f"mle-rl-daemon-{secrets.token_hex(4)}"
    res, _ = _run(task, tmp_path, f"""
import subprocess, time
sleeper = [sys.executable, "-c", "import time; time.sleep(300)", {marker!r}]
subprocess.Popen(sleeper, start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:          # classic double fork, keeping our stdout open
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, sleeper)
    os._exit(0)
time.sleep(0.5)
print("daemons started")
""", marker=marker)
    assert res.status == "invalid_submission"
    assert "daemons started" in res.stdout_tail


def test_kill_parent(task, tmp_path):
    me, parent = os.getpid(), os.getppid()
    res, _ = _run(task, tmp_path, f"""
import signal
for pid in (os.getppid(), 1, {me}, {parent}):
    try:
        os.kill(pid, signal.SIGKILL)
        print("sent", pid)
    except OSError as e:
        print("denied", pid, type(e).__name__)
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
print("still here")
""")
    assert res.status in ("invalid_submission", "error")
    assert psutil.pid_exists(parent)
    os.kill(me, 0)  # the caller is alive


def test_change_workdir_permissions(task, tmp_path):
    res, _ = _run(task, tmp_path, """
os.mkdir("locked")
open("locked/f", "w").write("x")
open("submission.csv", "w").write("id,y\\n")
os.chmod("locked", 0)
os.chmod("submission.csv", 0)
os.chmod(".", 0)
print("locked")
""")
    assert res.status == "invalid_submission"  # an empty submission; and the dir is gone


def test_exit_zero_without_submission(task, tmp_path):
    res, _ = _run(task, tmp_path, "print('all done')\nsys.exit(0)\n")
    assert res.status == "invalid_submission"
    assert "no submission" in res.message


def test_symlinked_submission_is_not_followed(task, tmp_path):
    res, _ = _run(task, tmp_path, f"""
os.symlink({str(task.private_dir / 'answers.csv')!r}, "submission.csv")
""")
    assert res.status == "invalid_submission"
    assert "regular file" in res.message


def test_fifo_submission_does_not_hang(task, tmp_path):
    res, _ = _run(task, tmp_path, "os.mkfifo('submission.csv')\n")
    assert res.status == "invalid_submission"


def test_signal_killed_program_is_an_error(task, tmp_path):
    res, _ = _run(task, tmp_path, "import signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert res.status == "error"
