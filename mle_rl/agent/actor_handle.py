"""The pool's handle on one actor process: start it, send it an action, read its answers,
time it, and, when it died or hung, kill it and say what became of its action.

`ActorPool` (`actors.py`) keeps one `Actor` per slot and replaces it when it fails; the
process itself runs `actor_process.actor_main` (the protocol is in that module).
"""

from __future__ import annotations

import dataclasses
import multiprocessing.connection as mp_connection
import os
import threading
import time
from typing import Any, Optional

from mle_rl.agent import actor_process
from mle_rl.env.types import ActionResult


@dataclasses.dataclass
class Actor:
    """One actor process and the action it is running (`request`, None when idle).

    `deadline`: when it counts as hung (monotonic s): its start-up limit until it reports
    ready, then the running action's limit plus the pool's margin; inf when idle."""

    actor_id: int
    process: Any
    conn: Any
    ready: bool = False
    request: Optional[Any] = None
    started_at: float = 0.0
    deadline: float = float("inf")
    limit_s: float = 0.0

    @classmethod
    def start(cls, mp_context, actor_id: int, *, work_fn: str, work_kwargs: dict,
              preload: tuple, failure_reward: float, start_method: str,
              startup_timeout_s: float) -> "Actor":
        """Spawns the process (never re-running the parent's `__main__`)."""
        parent_conn, child_conn = mp_context.Pipe(duplex=True)
        process = mp_context.Process(
            target=actor_process.actor_main,
            args=(child_conn, actor_id, work_fn, work_kwargs, preload, failure_reward,
                  os.getpid() if start_method == "spawn" else None,
                  start_method != "spawn"
                  or threading.current_thread() is threading.main_thread()),
            name=f"mle_rl-actor-{actor_id}",
            daemon=False,
        )
        with actor_process.main_module_hidden():
            process.start()
        child_conn.close()
        return cls(actor_id=actor_id, process=process, conn=parent_conn,
                   deadline=time.monotonic() + startup_timeout_s)

    def send(self, request) -> bool:
        """Hands `request` to this (idle) actor; False if its pipe is broken (it died)."""
        try:
            self.conn.send(request)
        except OSError:
            return False
        self.request = request
        self.started_at = time.monotonic()
        return True

    def start_clock(self, margin_s: float) -> None:
        self.started_at = time.monotonic()
        self.deadline = self.started_at + self.limit_s + margin_s

    def receive(self) -> tuple[list, bool]:
        """-> (every message waiting from the actor, whether its pipe is broken)."""
        messages, broken = [], False
        try:
            while self.conn.poll():
                messages.append(self.conn.recv())
        except Exception:  # EOF, a closed pipe, or a message cut short by a kill
            broken = True
        return messages, broken

    def kill(self, join_s: float) -> None:
        """SIGKILLs the actor's process group (the actor and any sandbox it started)."""
        actor_process.kill_group(self.process.pid)
        self.process.join(join_s)

    def exit_description(self) -> str:
        return actor_process.describe_exit(self.process.exitcode)

    def failed_action(self, *, hung: bool, exit_: str, margin_s: float,
                      failure_rewards: dict) -> ActionResult:
        """The result of the action this actor was running when it hung or died (`exit_`:
        how it exited): `timeout` or `error`, the failure reward, Δt = the actor's wall time
        on it."""
        wall_s = time.monotonic() - self.started_at
        if hung:
            status = "timeout"
            message = (f"actor {self.actor_id} did not answer within {wall_s:.1f} s (action "
                       f"limit {self.limit_s:g} s + margin {margin_s:g} s); killed and replaced")
        else:
            status = "error"
            message = f"actor {self.actor_id} died {exit_} during the action; replaced"
        return ActionResult(status=status, score=None, reward=failure_rewards[status],
                            duration_s=wall_s, message=message)


def wait_any(actors: list, wake_fd: int, timeout: float) -> set:
    """Waits up to `timeout` s (no later than the first deadline) for an answer, a death,
    or a byte on `wake_fd` (then read away); -> the pipes and sentinels that are ready."""
    next_deadline = min((a.deadline for a in actors), default=float("inf"))
    wait_s = max(0.0, min(timeout, next_deadline - time.monotonic()))
    objects = [a.conn for a in actors] + [a.process.sentinel for a in actors]
    ready = set(mp_connection.wait(objects + [wake_fd], timeout=wait_s))
    if wake_fd in ready:
        try:
            os.read(wake_fd, 4096)
        except BlockingIOError:
            pass
    return ready


def stop_all(actors: list, timeout: float) -> None:
    """Idle actors are asked to stop and get `timeout` s; busy ones, and any still alive
    after that, are killed with their process groups."""
    for actor in actors:
        if actor.request is None:
            try:
                actor.conn.send(None)
            except OSError:
                pass
        else:
            actor_process.kill_group(actor.process.pid)
    end = time.monotonic() + timeout
    for actor in actors:
        if actor.request is None:
            actor.process.join(max(0.0, end - time.monotonic()))
    for actor in actors:
        if actor.process.exitcode is None:  # still running after the grace period
            actor_process.kill_group(actor.process.pid)  # with anything it started
        actor.process.join(1.0)
        actor.conn.close()


def kill_all(actors: list) -> None:
    """Kills every actor still running (a pool dropped without `close()`)."""
    for actor in actors:
        if actor.process.exitcode is None:
            actor.kill(1.0)
