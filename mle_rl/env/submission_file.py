"""A submission file as hostile input: what may be read, and how much of it.

A program in the sandbox writes `submission.csv`; the grader reads it on the host. It must
be a regular file with one name (never a symlink, a hard link to another file, a FIFO, a
device or a directory), of bounded size, with lines bounded in bytes and in fields. It is
opened without following links or blocking, and checked to be the file inspected. No
pandas here, so `action.copy_submission` can use it cheaply.
"""

from __future__ import annotations

import os
import pathlib
import stat
from typing import BinaryIO

from mle_rl.env.types import InvalidSubmission

MAX_SUBMISSION_BYTES = 512 * 2**20   # never more, whatever the task
MIN_LIMIT_BYTES = 16 * 2**20         # a task's limit: max(this, ANSWERS_FACTOR x answers)
ANSWERS_FACTOR = 20
MAX_LINE_BYTES = 2**20
MAX_FIELDS = 4096
_CHUNK = 2**20


def _check_stat(st: os.stat_result, name: str, max_bytes: int) -> None:
    mode = st.st_mode
    kinds = {stat.S_ISLNK: "a symbolic link", stat.S_ISDIR: "a directory",
             stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket", stat.S_ISCHR: "a device",
             stat.S_ISBLK: "a device"}
    kind = next((k for test, k in kinds.items() if test(mode)), None)
    if kind or not stat.S_ISREG(mode):
        raise InvalidSubmission(f"{name} is {kind or 'special'}, not a regular file; "
                                "write the CSV file itself.")
    if st.st_nlink > 1:
        raise InvalidSubmission(f"{name} is a hard link (the file has {st.st_nlink} names); "
                                "write a new file instead of linking one.")
    if st.st_size == 0:
        raise InvalidSubmission(f"{name} is empty; write a header and one row per test id.")
    if st.st_size > max_bytes:
        raise InvalidSubmission(f"{name} is {st.st_size / 2**20:.0f} MiB, over the "
                                f"{max_bytes / 2**20:.0f} MiB limit for a submission.")


def open_submission(path, max_bytes: int = MAX_SUBMISSION_BYTES) -> BinaryIO:
    """Opens `path` (binary) if it is a regular file with one link and at most max_bytes.

    Raises InvalidSubmission otherwise. Never follows a link, never blocks on a FIFO, and
    checks the opened file is the one inspected.
    """
    name = pathlib.Path(path).name
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        raise InvalidSubmission("No submission file: the program wrote no submission.csv in "
                                "its working directory.") from None
    except OSError as e:
        raise InvalidSubmission(f"{name} could not be read: {e.strerror}.") from None
    _check_stat(before, name, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise InvalidSubmission(f"{name} could not be opened: {e.strerror}.") from None
    f = os.fdopen(fd, "rb")
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise InvalidSubmission(f"{name} was replaced while it was being checked.")
        _check_stat(now, name, max_bytes)
    except BaseException:
        f.close()
        raise
    return f


def copy_bounded(src: BinaryIO, dst: BinaryIO, max_bytes: int) -> None:
    """Copies src to dst in chunks; raises InvalidSubmission past max_bytes."""
    total = 0
    while chunk := src.read(_CHUNK):
        total += len(chunk)
        if total > max_bytes:
            raise InvalidSubmission(f"The submission grew past {max_bytes >> 20} MiB while it "
                                    "was being copied.")
        dst.write(chunk)


def check_lines(f: BinaryIO, max_line: int = MAX_LINE_BYTES,
                max_fields: int = MAX_FIELDS) -> None:
    """Reads f to the end in chunks; raises InvalidSubmission if a line is over max_line
    bytes or max_fields fields (commas counted, quoted or not): pandas is slow and greedy
    on very wide tables."""
    open_len = open_commas = 0   # the line still open at the end of the last chunk
    while chunk := f.read(_CHUNK):
        lines = chunk.replace(b"\r", b"\n").split(b"\n")
        first = (open_len + len(lines[0]), open_commas + lines[0].count(b","))
        closed = lines[1:-1]
        if len(lines) > 1:
            open_len, open_commas = len(lines[-1]), lines[-1].count(b",")
        else:
            open_len, open_commas = first
        longest = max(first[0], open_len, max(map(len, closed), default=0))
        widest = max(first[1], open_commas)
        if longest >= max_fields and closed:
            widest = max(widest, max(line.count(b",") for line in closed))
        if longest > max_line:
            raise InvalidSubmission(f"The submission has a line over {max_line / 2**20:g} MiB; "
                                    "write one short line per row.")
        if widest >= max_fields:
            raise InvalidSubmission(f"The submission has a line with over {max_fields} fields; "
                                    "write only the expected columns.")


def submission_limit(answers_path) -> int:
    """max(MIN_LIMIT_BYTES, ANSWERS_FACTOR x the answers' size), at most MAX_SUBMISSION_BYTES."""
    size = pathlib.Path(answers_path).stat().st_size
    return min(MAX_SUBMISSION_BYTES, max(MIN_LIMIT_BYTES, ANSWERS_FACTOR * size))
