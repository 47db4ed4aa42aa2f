"""One side of a peer benchmark as a long-lived process (used by `bench_tunix.py`).

Both sides, ours (the project's venv) and the peer's (its own venv), run `serve()`: it
answers one JSON line on the real stdout per JSON command line read from stdin, so the
orchestrator can interleave calls of the two warm processes. Anything a library prints
goes to stderr (the orchestrator's log file), never into the protocol.

Commands: {"cmd": "run", "prompts": [[int]], "new_tokens": G, "temperature": T,
"seed": s, "return_tokens": bool} -> {"seconds", "cpu_seconds", "compiles": [[name, s]],
"lengths": [int], "tokens"?: [[int]]}; {"cmd": "quit"}. The first line written is
{"ready": true, "info": {...}} once the model is loaded.

Standard library only at import: the peer's venv imports this file by path.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Callable, Sequence

# jax's monitoring event for one XLA compilation (jax/_src/dispatch.py BACKEND_COMPILE_EVENT).
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def pin_cores(cores: int | None) -> None:
    """Restrict this process (and every thread it starts later) to its first `cores` CPUs.
    Call before importing jax."""
    if cores:
        allowed = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, allowed[:cores])


def protocol_stdout():
    """A private copy of stdout for the protocol; fd 1 then points at stderr, so prints of
    any library end up in the log, not in the answers."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(2, 1)
    return proto


class CompileLog:
    """Every XLA compilation in this process (jitted functions and eager ops alike), with
    the name jax gives it and its backend compile seconds."""

    def __init__(self):
        import jax.monitoring
        self.events: list = []
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event, duration, **kwargs):
        if event == BACKEND_COMPILE_EVENT:
            self.events.append([str(kwargs.get("fun_name", "?")), float(duration)])

    def take(self) -> list:
        events, self.events = self.events, []
        return events


def serve(generate: Callable[[Sequence[Sequence[int]], int, float, int], list],
          info: dict, proto, compile_log: CompileLog) -> None:
    """Answer commands until "quit" or EOF. generate(prompts, new_tokens, temperature,
    seed) returns one sequence of generated token ids per prompt, on the host."""
    proto.write(json.dumps({"ready": True, "info": info}) + "\n")
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "quit":
            break
        try:
            compile_log.take()
            c0, t0 = time.process_time(), time.perf_counter()
            rows = generate(msg["prompts"], msg["new_tokens"], msg["temperature"], msg["seed"])
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            out = {"seconds": seconds, "cpu_seconds": cpu, "compiles": compile_log.take(),
                   "lengths": [len(r) for r in rows]}
            if msg.get("return_tokens"):
                out["tokens"] = [[int(t) for t in r] for r in rows]
        except Exception as e:  # noqa: BLE001 - reported to the orchestrator, which fails
            traceback.print_exc()
            out = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:500]}
        proto.write(json.dumps(out) + "\n")


def fail_startup(proto, e: BaseException) -> None:
    traceback.print_exc()
    proto.write(json.dumps({"ready": False,
                            "error": f"{type(e).__name__}: {e}".splitlines()[0][:500]}) + "\n")
