"""A pool of actor subprocesses that execute actions asynchronously.

The trainer `submit`s `ActionRequest`s (task id, the model's response text, the policy
version that wrote it, a nonce) and `poll`s for `ActionDone`s. Each actor is a spawned
Python process (JAX in the trainer is not fork-safe) that runs one action at a time:
parse -> instrument -> sandbox -> grade -> reward, via a work function given by import
path (default `actor_process.default_work`, which calls
`mle_rl.env.action.run_action`; its options are documented there).

No action is silently lost. An actor that dies mid-action (a crash, `kill -9`, the OOM
killer) or does not answer within the action's limit plus a margin (hung) is killed with
everything it started and replaced, and its action comes back as a failed `ActionDone`
(`error` for a death, `timeout` for a hang) with the reward scheme's failure reward and a
message saying what happened. A work function that raises returns an `error` result with
the traceback tail; the actor lives on. An actor that dies or stalls before it is ready
never started the action sent to it, so that action is queued again. Requests still
queued or running when the pool is closed are returned by `close()`. The Δt of a death or
hang is the actor's wall time on it (the program's own time is unknown).

Δt for the duration-aware gradient is `ActionDone.result.duration_s` (the program's own
wall time, measured by the sandbox); `ActionDone.wall_s` is the actor's total time.

`submit` queues and dispatches; `poll` is rounds of dispatch -> wait -> supervise (read
answers, replace dead and hung actors) -> dispatch; `close` stops them all. The pool's
handle on one actor process is `actor_handle.Actor`; the process itself, `actor_process`.

    with ActorPool(8, work_kwargs={"reward_scheme": "rl4mle"}) as pool:
        pool.submit(ActionRequest(0, "spaceship-titanic", text, policy_version=3, nonce="a1"))
        for done in pool.poll(timeout=1.0):
            ...
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import threading
import time
import weakref
from typing import Callable, Optional, Sequence, Union

from mle_rl.agent import actor_process
from mle_rl.agent.actor_handle import Actor, kill_all, stop_all, wait_any
from mle_rl.env import rewards
from mle_rl.env.types import ActionResult

DEFAULT_WORK_FN = "mle_rl.agent.actor_process:default_work"
# Imported once per actor so that grading and the env's own imports are warm.
DEFAULT_PRELOAD = ("numpy", "pandas", "sklearn.metrics", "mle_rl.env.action", "mle_rl.env.tasks")
# Hang limit when neither the pool nor work_kwargs give one: generous, so that a long but
# legitimate action is never killed as hung.
DEFAULT_ACTION_TIMEOUT_S = 3600.0


@dataclasses.dataclass(frozen=True)
class ActionRequest:
    """One action for an actor. Keep it small: the trainer keeps prompt tokens itself,
    keyed by `request_id`; `meta` is passed through to the work function untouched."""

    request_id: int
    task_id: str
    response: str
    policy_version: int
    nonce: str
    prev_score: Optional[float] = None
    prev_code: Optional[str] = None
    meta: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ActionDone:
    """A finished action: the request, its result, which actor ran it and for how long."""

    request: ActionRequest
    result: ActionResult
    actor_id: int
    wall_s: float


def _close_fds(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class ActorPool:
    """N actor subprocesses running `ActionRequest`s; see the module docstring.

    Args:
      num_actors: how many actions run at once.
      work_fn: `"module:function"` (or a top-level function) called in the actor as
        `fn(request, ctx) -> ActionResult`.
      work_kwargs: given to the work function as `ctx.work_kwargs` (e.g. mlebench_dir,
        cache_dir, instrumenter, reward_scheme).
      action_timeout_s: the action's own limit, a number or `fn(request) -> seconds` (pass
        the task's `timeout_s`); an actor that has not answered after that plus
        `hang_margin_s` is killed and replaced. Default: `work_kwargs["timeout_s"]` if
        set, else DEFAULT_ACTION_TIMEOUT_S.
      hang_margin_s: slack on top of the action's limit (sandbox start, grading).
      startup_timeout_s: an actor not ready (imports done) by then is killed and replaced;
        an action waiting in its pipe goes back to the front of the queue.
      failure_reward: reward of an action whose actor died, hung, or whose work function
        raised; by default what `work_kwargs["reward_scheme"]` gives an "error" (death,
        exception) or a "timeout" (hang) with no score (rl4mle: -10 both; mlagent: 0, 0.5).
      start_method: "spawn" or "forkserver" (never fork: JAX in the parent).
      preload: modules each actor imports once at start; default: the env's for the
        default work function, none otherwise.
    """

    def __init__(
        self,
        num_actors: int,
        *,
        work_fn: Union[str, Callable] = DEFAULT_WORK_FN,
        work_kwargs: Optional[dict] = None,
        action_timeout_s: Union[None, float, Callable[[ActionRequest], float]] = None,
        hang_margin_s: float = 30.0,
        startup_timeout_s: float = 120.0,
        failure_reward: Optional[float] = None,
        start_method: str = "spawn",
        preload: Optional[Sequence[str]] = None,
    ):
        if num_actors < 1:
            raise ValueError(f"num_actors must be at least 1, got {num_actors}.")
        if start_method not in ("spawn", "forkserver"):
            raise ValueError(
                f"start_method must be 'spawn' or 'forkserver', got {start_method!r} "
                "(fork is unsafe once JAX has started threads)."
            )
        self._work_fn = actor_process.work_fn_path(work_fn)
        self._work_kwargs = dict(work_kwargs or {})
        scheme = self._work_kwargs.get("reward_scheme", "rl4mle")
        # What an action whose actor died ("error") or hung ("timeout") earns.
        self.failure_rewards = {
            status: float(failure_reward) if failure_reward is not None
            else rewards.compute_reward(scheme, status=status, score=None, is_lower_better=False)
            for status in ("error", "timeout")
        }
        if action_timeout_s is None:
            action_timeout_s = self._work_kwargs.get("timeout_s") or DEFAULT_ACTION_TIMEOUT_S
        self._timeout = action_timeout_s
        self._margin = float(hang_margin_s)
        self._startup_timeout = float(startup_timeout_s)
        if preload is None:
            preload = DEFAULT_PRELOAD if self._work_fn == DEFAULT_WORK_FN else ()
        self._preload = tuple(preload)
        self._start_method = start_method
        self._mp = mp.get_context(start_method)
        self._lock = threading.RLock()  # held by poll/close; guards the actors
        self._submit_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        weakref.finalize(self, _close_fds, self._wake_r, self._wake_w)
        self._queue: collections.deque = collections.deque()
        self._done: list = []
        self._stats = collections.Counter()
        self._failures = collections.Counter()
        self._statuses = collections.Counter()
        self._startup_deaths = 0
        self._closed = False
        self._actors = [self._start_actor(i) for i in range(num_actors)]
        self._stats["actors_started"] = num_actors
        ref = weakref.ref(self)
        self._atexit = lambda: ref() is not None and ref().close()
        atexit.register(self._atexit)
        # A pool dropped without close() still takes its actors with it.
        self._finalizer = weakref.finalize(self, kill_all, self._actors)

    # ---------------------------------------------------------------- public surface

    def submit(self, request: ActionRequest) -> None:
        """Queues one action; it starts as soon as an actor is free.

        Safe to call from another thread while one thread is inside `poll`.
        """
        if not isinstance(request, ActionRequest):
            raise TypeError(f"submit takes an ActionRequest, got {type(request).__name__}.")
        self._check_open()
        with self._submit_lock:
            self._queue.append(request)
            self._stats["actions_submitted"] += 1
        self._dispatch_or_wake()

    def poll(self, timeout: float = 0.0) -> list:
        """Returns finished `ActionDone`s, waiting up to `timeout` s for the first one.

        Also notices dead and hung actors, replaces them and returns their actions as
        failures, and hands queued requests to free actors.
        """
        end = time.monotonic() + max(0.0, timeout)
        with self._lock:
            self._check_open()
            while True:
                self._dispatch()
                ready = wait_any(self._actors, self._wake_r,
                                 max(0.0, end - time.monotonic()))
                self._supervise(ready)
                self._dispatch()
                if self._done or time.monotonic() >= end:
                    done, self._done = self._done, []
                    return done

    def in_flight(self) -> int:
        """Actions submitted and not yet returned by `poll` (queued + running)."""
        running = sum(a.request is not None for a in list(self._actors))
        return len(self._queue) + running + len(self._done)

    def num_queued(self) -> int:
        """Actions waiting for a free actor."""
        return len(self._queue)

    def num_alive(self) -> int:
        """Actor processes currently alive."""
        sentinels = [a.process.sentinel for a in list(self._actors)]
        return len(sentinels) - len(mp_connection.wait(sentinels, timeout=0))

    def pids(self) -> dict:
        """{actor_id: pid} of the current actor processes."""
        return {a.actor_id: a.process.pid for a in list(self._actors)}

    def running(self) -> dict:
        """{request_id: actor_id} of the actions running now."""
        return {a.request.request_id: a.actor_id for a in list(self._actors) if a.request}

    def stats(self) -> dict:
        """Counts: actors started/replaced, actions submitted/done, failures by cause
        (died, hung, exception), results by status, and what is in flight now."""
        out = {k: self._stats[k] for k in (
            "actors_started", "actors_replaced", "actions_submitted", "actions_done")}
        out["failures"] = dict(self._failures)
        out["statuses"] = dict(self._statuses)
        out["queued"] = len(self._queue)
        out["running"] = sum(a.request is not None for a in list(self._actors))
        return out

    def close(self, timeout: float = 5.0) -> list:
        """Stops every actor and returns the requests that never finished.

        Idle actors are asked to stop (they close their warm sandboxes); any still alive
        after `timeout` s, and busy ones, are killed with their process groups. Safe to
        call twice; also runs at interpreter exit.
        """
        with self._lock:
            if self._closed:
                return []
            self._closed = True
            atexit.unregister(self._atexit)
            self._finalizer.detach()
            unfinished = [a.request for a in self._actors if a.request is not None]
            unfinished += list(self._queue)
            self._queue.clear()
            stop_all(self._actors, timeout)
            return unfinished

    def __enter__(self) -> "ActorPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- dispatching

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this ActorPool is closed; make a new one.")

    def _start_actor(self, actor_id: int) -> Actor:
        return Actor.start(self._mp, actor_id, work_fn=self._work_fn,
                           work_kwargs=self._work_kwargs, preload=self._preload,
                           failure_reward=self.failure_rewards["error"],
                           start_method=self._start_method,
                           startup_timeout_s=self._startup_timeout)

    def _limit_s(self, request: ActionRequest) -> float:
        return float(self._timeout(request) if callable(self._timeout) else self._timeout)

    def _dispatch_or_wake(self) -> None:
        """Dispatches now if no `poll` holds the pool, else wakes that poll to do it."""
        if self._lock.acquire(blocking=False):
            try:
                self._dispatch()
            finally:
                self._lock.release()
        else:
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass

    def _dispatch(self) -> None:
        """Hands queued requests to idle actors, ready ones first. An actor still starting
        gets the request in its pipe; its hang clock starts when it reports ready."""
        idle = [a for a in self._actors if a.request is None]
        idle.sort(key=lambda a: not a.ready)
        for actor in idle:
            if not self._queue:
                return
            request = self._queue.popleft()
            if not actor.send(request):  # died while idle; _supervise will replace it
                self._queue.appendleft(request)
                continue
            actor.limit_s = self._limit_s(request)
            if actor.ready:
                actor.start_clock(self._margin)

    def _drain(self, actor: Actor) -> bool:
        """Handles every message waiting from `actor`; True if its pipe is broken."""
        messages, broken = actor.receive()
        for message in messages:
            self._handle(actor, message)
        return broken

    def _handle(self, actor: Actor, message: tuple) -> None:
        kind = message[0]
        if kind == "ready":
            actor.ready = True
            self._startup_deaths = 0
            actor.deadline = float("inf")
            if actor.request is not None:
                actor.start_clock(self._margin)
        elif kind == "done":
            _, request_id, result, wall_s, cause = message
            request = actor.request
            if request is None or request.request_id != request_id:
                return  # an answer to an action already given up on
            actor.request, actor.deadline = None, float("inf")
            if cause:
                self._failures[cause] += 1
            self._finish(ActionDone(request, result, actor.actor_id, float(wall_s)))
        elif kind == "fatal":
            self.close()
            raise RuntimeError(f"actor {actor.actor_id} stopped: {message[1]}")

    def _finish(self, done: ActionDone) -> None:
        self._stats["actions_done"] += 1
        self._statuses[done.result.status] += 1
        self._done.append(done)

    # ---------------------------------------------------------------- supervision

    def _supervise(self, ready: set) -> None:
        """Reads what the actors sent; replaces the dead, and the hung (past deadline)."""
        for i, actor in enumerate(list(self._actors)):
            dead = actor.process.sentinel in ready
            if actor.conn in ready or dead:
                dead = self._drain(actor) or dead
            if dead:
                self._replace(i, hung=False)
            elif time.monotonic() > actor.deadline:  # hung, or never got ready
                self._replace(i, hung=True)

    def _replace(self, index: int, *, hung: bool) -> None:
        """Kills actor `index` (and its group), requeues or fails its action, starts a new
        one in its place."""
        actor = self._actors[index]
        actor.kill(5.0)
        self._drain(actor)  # the pipe is final now: a late "ready" or "done" counts
        actor.conn.close()
        exit_ = actor.exit_description()
        if not actor.ready:
            self._start_failed(actor, exit_)
        elif actor.request is not None:
            self._fail_action(actor, hung=hung, exit_=exit_)
        else:
            self._failures["died_idle"] += 1
        self._actors[index] = self._start_actor(actor.actor_id)
        self._stats["actors_replaced"] += 1
        self._stats["actors_started"] += 1

    def _start_failed(self, actor: Actor, exit_: str) -> None:
        """An actor that died or stalled before it was ready never started the action in
        its pipe: that action goes back to the front of the queue. Gives up (closes the pool
        and raises) when actors keep failing to start."""
        if actor.request is not None:
            self._queue.appendleft(actor.request)
            actor.request = None
        self._failures["start_failed"] += 1
        self._startup_deaths += 1
        if self._startup_deaths > 3 * len(self._actors):
            self.close()
            raise RuntimeError(
                f"actors keep failing to start (last: actor {actor.actor_id} {exit_}); "
                f"check the work function {self._work_fn!r} and the preload modules "
                f"{list(self._preload)}."
            )

    def _fail_action(self, actor: Actor, *, hung: bool, exit_: str) -> None:
        """The action of an actor that hung or died comes back as a failed `ActionDone`."""
        self._failures["hung" if hung else "died"] += 1
        result = actor.failed_action(hung=hung, exit_=exit_, margin_s=self._margin,
                                     failure_rewards=self.failure_rewards)
        self._finish(ActionDone(actor.request, result, actor.actor_id, result.duration_s))
