"""A full disk, said in one line: which path, how much room is left, what to do.

Every writer of a run (checkpoints, metrics.jsonl, the exported policy) turns a write that
failed for lack of space into `DiskFullError`, after undoing what it half wrote, so the
run stops with one line naming the path and its free space, and `--resume` continues from
the last whole checkpoint once there is room. A generated program that fills its own
sandbox is that program's failure, not this.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from typing import Optional

NO_SPACE = ("No space left on device", "os_error_code='28'", "ENOSPC", "Disk quota exceeded")


class DiskFullError(OSError):
    """A write of the run failed for lack of space (the message is one line for a person)."""

    def __init__(self, message: str):
        super().__init__(errno.ENOSPC, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def is_disk_full(e: Optional[BaseException]) -> bool:
    """Whether `e` (or what it was raised from) is a write that found no room: ENOSPC /
    EDQUOT, or orbax's and tensorstore's wrapping of them."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(s in str(e) for s in NO_SPACE):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def free_space(path) -> str:
    """'<free> free of <total>' on the file system holding `path` (or its nearest existing
    parent)."""
    p = os.path.abspath(os.fspath(path))
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    try:
        u = shutil.disk_usage(p)
    except OSError:
        return "free space unknown"
    return f"{_size(u.free)} free of {_size(u.total)}"


def disk_full(path, what: str, after: str = "") -> DiskFullError:
    """The one line: `what` could not be written to `path`, the room there, `after`."""
    tail = f" {after}" if after else ""
    return DiskFullError(f"no space left for {what} in {path} ({free_space(path)});{tail} "
                         f"free some space there (or point --workdir / TMPDIR elsewhere), "
                         f"then run again with --resume.")


class DropWriteFailureEchoes(logging.Filter):
    """Drops the echoes of a failed write; the error itself reaches the caller, which says
    it once. Two kinds: orbax's per-thread tracebacks (each background thread of a save logs
    the same error at ERROR), and asyncio's "exception was never retrieved" for the sibling
    writes of a gather that failed on a full disk (only the first failure is retrieved; the
    rest are logged, with their tracebacks, whenever the future is collected). Other
    records pass, asyncio's about any other error included."""

    def filter(self, record: logging.LogRecord) -> bool:
        path = record.pathname.replace(os.sep, "/")
        if "/orbax/" in path and "raised an exception" in record.getMessage():
            return False
        if record.name == "asyncio" and "exception was never retrieved" in record.getMessage():
            return not is_disk_full(record.exc_info[1] if record.exc_info else None)
        return True


def quiet_write_failures() -> None:
    """Installs `DropWriteFailureEchoes` on the absl and asyncio loggers (idempotent)."""
    for name in ("absl", "asyncio"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropWriteFailureEchoes) for f in logger.filters):
            logger.addFilter(DropWriteFailureEchoes())
