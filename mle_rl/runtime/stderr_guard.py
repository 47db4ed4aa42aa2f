"""The stderr of a multi-process run's process, passed through a guard process that turns
the jax.distributed client's fatal abort into one line.

When the coordination service reports a fatal error (above all: process 0, which hosts it,
died), the client in every other process aborts from a C++ thread within a second or two:
gRPC errors, "Terminating process because the JAX distributed service detected fatal
errors", a check-failure stack trace and a Python thread dump. No Python code of that
process runs again, so the one line has to come from outside it: `install` puts this
script (its own process, standard library only) between the process's file descriptor 2
and the real stderr. Lines pass through unchanged (the coordination service's error lines
after a short hold); when the abort's marker comes, the held lines and everything after
are dropped and one line names the lost process and the checkpoint to resume from. The
guard ends when the last writer of the pipe closes it.

    python stderr_guard.py NUM_PROCESSES PROCESS_ID CHECKPOINT_DIR   (reads stdin)
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time

MARKER = "Terminating process because the JAX distributed service detected fatal errors"
# Lines the coordination service prints around a fatal error: held back for HOLD_S, dropped
# if the abort follows, passed on if it does not.
NOISE = ("coordination_service", "GRPC error information", "Error received from peer",
         "preemption_sync_manager", "CoordinationServiceError", "This is only expected if")
HOLD_S = 2.0


def lost_process(lines: list, me: int, n: int) -> str:
    text = "\n".join(lines)
    m = re.search(r"[Tt]ask (\d+) heartbeat timeout", text) or re.search(
        r"stopped sending heartbeats\):\s*(\d+)", text)
    if m and int(m.group(1)) != me:
        return f"process {m.group(1)} of {n} was lost"
    if me != 0:
        return f"process 0 of {n} (the coordinator) was lost"
    return f"a process of {n} was lost"


def resume_hint(checkpoint_dir: str) -> str:
    try:
        steps = sorted(int(s) for s in os.listdir(checkpoint_dir) if s.isdigit())
    except OSError:
        steps = []
    if not steps:
        return "no checkpoint was finished by all processes: start the run again"
    return (f"run every process again with --resume: they continue from checkpoint "
            f"{steps[-1]}, the last one all of them finished")


def guard(inp, out, me: int, n: int, checkpoint_dir: str) -> None:
    """Copies lines from the binary stream `inp` to the text stream `out` until EOF."""
    fd = inp.fileno()
    held: list = []            # (line, since when) of coordination noise
    recent: list = []
    buf = b""
    dropping = False
    while True:
        timeout = HOLD_S if held else None
        ready, _, _ = select.select([fd], [], [], timeout)
        now = time.monotonic()
        if not ready:                                  # nothing came: pass the held lines on
            for line, _ in held:
                out.write(line)
            held = []
            out.flush()
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", errors="replace") + "\n"
            recent = (recent + [line])[-80:]
            if dropping:
                continue
            if MARKER in line:
                dropping = True
                held = []
                out.write(f"error: {lost_process(recent, me, n)} (the JAX coordination "
                          f"service aborted process {me}); {resume_hint(checkpoint_dir)}.\n")
                out.flush()
                continue
            if any(s in line for s in NOISE):
                held.append((line, now))
                continue
            for h, _ in held:
                out.write(h)
            held = []
            out.write(line)
        out.flush()
    if not dropping:
        for h, _ in held:
            out.write(h)
        if buf:
            out.write(buf.decode("utf-8", errors="replace"))
    out.flush()


def install(process_id: int, num_processes: int, checkpoint_dir: str) -> subprocess.Popen:
    """Routes this process's fd 2 (and so its children's) through a guard process."""
    real = os.dup(2)
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(num_processes),
                             str(process_id), str(checkpoint_dir)],
                            stdin=r, stdout=real, stderr=real, close_fds=True,
                            start_new_session=True)
    os.close(r)
    os.dup2(w, 2)
    os.close(w)
    os.close(real)
    return proc


if __name__ == "__main__":
    n, me, ckpt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    try:
        guard(sys.stdin.buffer, sys.stdout, me, n, ckpt)
    except KeyboardInterrupt:
        pass
