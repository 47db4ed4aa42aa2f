"""The bootstrap that runs inside every sandbox (passed to `python -c`; stdlib only).

argv: READY_FD UID MAX_PROCS PRELOAD (comma-separated modules, may be empty).
1. Drops to UID (when started as root; UID -1 keeps the current one) after capping
   RLIMIT_NPROC, so the process count limit binds even on a root host.
2. Imports PRELOAD with stdout/stderr silenced, then writes b"R" on READY_FD.
3. Reads stdin to EOF: one JSON header line of limits, then the program's code.
4. Closes READY_FD and stdin, sets RLIMIT_CPU / FSIZE / NPROC (and RLIMIT_AS when no cgroup
   limits memory), and runs the code as
   `__main__` (filename `solution.py`); an uncaught exception prints its traceback and
   exits 1.
"""

import json
import math
import os
import resource
import sys


def _limit(res, value, slack=0):
    """Sets soft = value, hard = value + slack (never above the current hard limit)."""
    value = int(value)
    soft, hard = resource.getrlimit(res)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard - slack)
    resource.setrlimit(res, (value, value + slack))


def _main():
    ready_fd, uid, max_procs = (int(a) for a in sys.argv[1:4])
    preload = sys.argv[4]
    _limit(resource.RLIMIT_NPROC, max_procs)
    _limit(resource.RLIMIT_CORE, 0)
    if uid >= 0 and os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if preload:
        import importlib
        saved = os.dup(1), os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        try:
            for name in preload.split(","):
                try:
                    importlib.import_module(name)
                except Exception:
                    pass
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (*saved, null):
                os.close(fd)
    try:
        os.write(ready_fd, b"R")
    except OSError:
        pass
    data = sys.stdin.buffer.read()
    os.close(ready_fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    header, _, code = data.partition(b"\n")
    lim = json.loads(header)
    _limit(resource.RLIMIT_NPROC, lim["max_procs"])
    _limit(resource.RLIMIT_FSIZE, lim["max_file_mb"] * 2**20)
    if lim.get("memory_mb"):  # None when a cgroup limits the whole tree instead
        _limit(resource.RLIMIT_AS, lim["memory_mb"] * 2**20)
    if lim.get("cpu_s"):
        used = resource.getrusage(resource.RUSAGE_SELF)
        budget = math.ceil(used.ru_utime + used.ru_stime + float(lim["cpu_s"]))
        _limit(resource.RLIMIT_CPU, budget, slack=1)  # SIGXCPU first, SIGKILL 1 s later
    return code.decode("utf-8", "surrogatepass")


def _finish(code):
    """Leaves without the interpreter's teardown of ~1,600 preloaded modules (~0.4 s):
    waits for non-daemon threads and runs atexit handlers as Python would, flushes."""
    import atexit

    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _run(code):
    import linecache

    linecache.cache["solution.py"] = (len(code), None, code.splitlines(True), "solution.py")
    import types

    sys.argv = ["solution.py"]
    # A fresh `__main__` module, so that pickling the program's own functions by name
    # (multiprocessing, joblib) finds them.
    main = types.ModuleType("__main__")
    main.__file__ = "solution.py"
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    try:
        exec(compile(code, "solution.py", "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            _finish(e.code or 0)
        print(e.code, file=sys.stderr)
        _finish(1)
    except BaseException as e:
        import traceback

        # Drop this bootstrap's own frame: the traceback starts in solution.py.
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        _finish(1)
    _finish(0)


if __name__ == "__main__":  # `python -c`; importing this module does nothing
    _run(_main())
