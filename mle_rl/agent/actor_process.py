"""The inside of one actor: a subprocess that runs actions one at a time.

`ActorPool` (`actors.py`, through its handle `actor_handle.Actor`) starts each actor with
`actor_main` under multiprocessing's *spawn* (or *forkserver*) start method and talks to
it over one duplex pipe:

    actor -> pool   ("ready", pid)                        once, after imports
    pool  -> actor  ActionRequest                         one action
    actor -> pool   ("done", request_id, ActionResult, wall_s, cause)
    pool  -> actor  None                                  stop: close resources, exit
    actor -> pool   ("fatal", message)                    the work function can't be loaded

`cause` is None, or "exception" when the work function raised (the result is then an
`error` ActionResult carrying the traceback tail, and the actor lives on).

An actor never outlives the pool's process: it runs in its own session (so the pool can
kill it together with the processes it started; bubblewrap sandboxes, in a session of
their own, go by `--die-with-parent`; and a terminal's Ctrl-C reaches only the trainer,
which closes the pool), asks Linux for SIGTERM when its parent dies
(`prctl(PR_SET_PDEATHSIG)`), and a watcher thread checks the parent pid twice a second in
case that signal is unavailable. Either way it kills its whole process group.

The parent-side helpers (marked below: naming the work function, starting an actor without
re-running the trainer's `__main__`, killing an actor's process group) are what
`ActorPool` and `actor_handle.Actor` use to manage these processes.

No JAX here: this module and the work functions run in plain Python processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable, Optional, Union

from mle_rl.env.isolation import SandboxUnavailable
from mle_rl.env.types import ActionResult

_PR_SET_PDEATHSIG = 1
_WATCH_PERIOD_S = 0.5
_TRACEBACK_TAIL_CHARS = 2000


@dataclasses.dataclass
class ActorContext:
    """What a work function may keep between actions inside one actor.

    `cache` holds anything worth computing once per actor (resolved tasks, a warm
    sandbox pool); `resources` are closed (`.close()`) when the actor stops cleanly.
    """

    actor_id: int
    work_kwargs: dict
    cache: dict = dataclasses.field(default_factory=dict)
    resources: list = dataclasses.field(default_factory=list)

    def close(self) -> None:
        for resource in reversed(self.resources):
            try:
                resource.close()
            except Exception:  # closing is best effort; the process is exiting anyway
                traceback.print_exc()
        self.resources.clear()


def resolve_work_fn(path: str, what: str = "work_fn") -> Callable:
    """Imports `"package.module:function"` and returns the function."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"{what} {path!r} is not an import path; write it as 'package.module:function'."
        )
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{what} {path!r} names {type(obj).__name__}, not a function.")
    return obj


def _instrumenter(spec, ctx: ActorContext):
    """'lm:<dir>' -> one frozen-LM instrumenter per actor, loaded on first use; other specs
    pass through to the environment."""
    if not (isinstance(spec, str) and spec.startswith("lm:")):
        return spec
    if "lm_instrumenter" not in ctx.cache:
        from mle_rl.warmstart.frozen import load_lm_instrumenter

        ctx.cache["lm_instrumenter"] = load_lm_instrumenter(spec[3:], log=lambda *a: None)
    return ctx.cache["lm_instrumenter"]


def default_work(request, ctx: ActorContext) -> ActionResult:
    """Runs `mle_rl.env.action.run_action` on the request, inside an actor.

    `ctx.work_kwargs` may hold: `mlebench_dir`, `cache_dir`, `task_dir` (for `get_task`),
    `task_factory` (import path of a `(task_id, **kw) -> Task` used instead of
    `mle_rl.env.tasks:get_task`), `instrumenter`, `reward_scheme`, `timeout_s`,
    `memory_mb`, and `warm_pool` (a dict of `WarmPool` keyword arguments; absent or None
    for no warm pool). Tasks and the warm pool are made once per actor; everything in
    `work_kwargs` must pickle (paths and names, not objects).
    """
    from mle_rl.env import action

    kw = ctx.work_kwargs
    tasks = ctx.cache.setdefault("tasks", {})
    if request.task_id not in tasks:
        factory_path = kw.get("task_factory") or "mle_rl.env.tasks:get_task"
        factory = resolve_work_fn(factory_path, "task_factory")
        where = {"mlebench_dir": kw.get("mlebench_dir"), "cache_dir": kw.get("cache_dir")}
        if kw.get("task_dir"):
            where["task_dir"] = kw["task_dir"]
        tasks[request.task_id] = factory(request.task_id, **where)
    if "warm_pool" not in ctx.cache:
        warm_pool = None
        if kw.get("warm_pool") is not None:
            from mle_rl.env.warm_pool import WarmPool

            warm_pool = WarmPool(**kw["warm_pool"])
            ctx.resources.append(warm_pool)
        ctx.cache["warm_pool"] = warm_pool
    instrumenter = _instrumenter(kw.get("instrumenter", "ast"), ctx)
    before = (instrumenter.accepted, instrumenter.fallbacks) if hasattr(
        instrumenter, "fallbacks") else None
    result = action.run_action(
        tasks[request.task_id],
        request.response,
        nonce=request.nonce,
        instrumenter=instrumenter,
        reward_scheme=kw.get("reward_scheme", "rl4mle"),
        prev_score=request.prev_score,
        prev_code=request.prev_code,
        timeout_s=kw.get("timeout_s"),
        memory_mb=kw.get("memory_mb"),
        pool=ctx.cache["warm_pool"],
    )
    if before is not None:       # the frozen LM: did it instrument this program, or the AST?
        if instrumenter.accepted > before[0]:
            result = dataclasses.replace(result, instrumented_by="lm")
        elif instrumenter.fallbacks > before[1]:
            result = dataclasses.replace(result, instrumented_by="lm_fallback")
    return result


# ---------------------------------------------------------------- parent side

def work_fn_path(work_fn: Union[str, Callable]) -> str:
    """The `"module:function"` an actor imports for `work_fn` (a path or a function)."""
    if isinstance(work_fn, str):
        if ":" not in work_fn:
            raise ValueError(
                f"work_fn {work_fn!r} is not an import path; "
                "write it as 'package.module:function'."
            )
        return work_fn
    module, qualname = getattr(work_fn, "__module__", None), getattr(work_fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        raise ValueError(
            f"work_fn {work_fn!r} must be a top-level function of an importable module "
            "(actors import it by name); move it out of __main__ or pass 'module:function'."
        )
    return f"{module}:{qualname}"


def describe_exit(exitcode: Optional[int]) -> str:
    if exitcode is None:
        return "with no exit status"
    if exitcode < 0:
        return f"(signal {-exitcode})"
    return f"(exit code {exitcode})"


@contextlib.contextmanager
def main_module_hidden():
    """Keeps spawn from re-running the trainer's `__main__` (and its JAX imports) in each
    actor: work functions are imported by name, never from `__main__`."""
    main = sys.modules.get("__main__")
    saved = {k: getattr(main, k) for k in ("__spec__", "__file__") if hasattr(main, k)}
    try:
        if main is not None:
            main.__spec__ = None
            if "__file__" in saved:
                del main.__file__
        yield
    finally:
        for key, value in saved.items():
            setattr(main, key, value)


def kill_group(pid: Optional[int]) -> None:
    """SIGKILLs an actor's process group: the actor and any sandbox it started."""
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- child side

def _kill_own_group(signum=None, frame=None) -> None:
    """Kills this actor and everything it started (same process group), then exits."""
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(1)


def _die_with_parent(parent_pid: Optional[int], use_pdeathsig: bool) -> None:
    """Arranges for this process (and its group) to die when its parent does.

    `parent_pid`: the pool's pid under spawn (if it is no longer our parent, it died
    already); None under forkserver, whose server is the parent and dies with the pool.
    """
    signal.signal(signal.SIGTERM, _kill_own_group)
    if use_pdeathsig and sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the watcher thread below still covers it
            use_pdeathsig = False
    if parent_pid is None:
        parent_pid = os.getppid()
    elif os.getppid() != parent_pid:  # the parent died before we got here
        _kill_own_group()

    def watch() -> None:
        while True:
            time.sleep(_WATCH_PERIOD_S)
            if os.getppid() != parent_pid:
                _kill_own_group()

    threading.Thread(target=watch, name="parent-watcher", daemon=True).start()


def _error_result(message: str, failure_reward: float, stderr_tail: str = "") -> ActionResult:
    return ActionResult(
        status="error",
        score=None,
        reward=failure_reward,
        duration_s=0.0,
        stderr_tail=stderr_tail[-_TRACEBACK_TAIL_CHARS:],
        message=message,
    )


def _run_one(work_fn, request, ctx: ActorContext, failure_reward: float):
    """Runs one action; returns (result, cause). Never raises for a work-function bug."""
    try:
        result = work_fn(request, ctx)
    except SandboxUnavailable:
        raise
    except Exception as e:  # a bug in the work function must not kill the actor
        message = (
            f"the work function raised {type(e).__name__}: {e}"[:500]
            + " (traceback in stderr_tail)"
        )
        return _error_result(message, failure_reward, traceback.format_exc()), "exception"
    if not isinstance(result, ActionResult):
        message = f"the work function returned {type(result).__name__}, not an ActionResult."
        return _error_result(message, failure_reward), "exception"
    return result, None


def actor_main(
    conn,
    actor_id: int,
    work_fn_path: str,
    work_kwargs: dict,
    preload: tuple,
    failure_reward: float,
    parent_pid: Optional[int],
    use_pdeathsig: bool,
) -> None:
    """Entry point of one actor process (see the module docstring for the protocol)."""
    os.setsid()  # own group: killable with its sandboxes; a terminal's Ctrl-C skips it
    _die_with_parent(parent_pid, use_pdeathsig)
    try:
        for module_name in preload:
            importlib.import_module(module_name)
        work_fn = resolve_work_fn(work_fn_path)
    except Exception as e:
        conn.send(("fatal", f"could not load the work function {work_fn_path!r}: "
                            f"{type(e).__name__}: {e}"))
        conn.close()
        return
    ctx = ActorContext(actor_id=actor_id, work_kwargs=dict(work_kwargs))
    conn.send(("ready", os.getpid()))
    try:
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):  # the pool went away
                break
            if request is None:
                break
            start = time.monotonic()
            try:
                result, cause = _run_one(work_fn, request, ctx, failure_reward)
            except SandboxUnavailable as e:  # fail closed: no reward without isolation
                conn.send(("fatal", str(e)))
                break
            wall_s = time.monotonic() - start
            try:
                conn.send(("done", request.request_id, result, wall_s, cause))
            except (BrokenPipeError, EOFError, OSError):
                break
            except Exception as e:  # the result would not pickle
                fallback = _error_result(
                    f"the action's result could not be sent back ({type(e).__name__}: {e}).",
                    failure_reward,
                )
                conn.send(("done", request.request_id, fallback, wall_s, "exception"))
    finally:
        ctx.close()
        conn.close()
