"""Reads a sandboxed program's stdout/stderr as it comes, keeping only a bounded tail."""

from __future__ import annotations

import os
import threading


class Tail:
    """Reads a pipe on a thread, keeping only the last `cap` bytes, and, whatever their
    position in the stream, the first `MAX_WATCHED` lines that start with `watch`."""

    MAX_WATCHED, LINE_CAP = 256, 4096

    def __init__(self, fd: int, cap: int):
        self.cap, self.buf, self.total = cap, bytearray(), 0
        self.watch, self.partial, self.watched = b"", b"", []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, args=(fd,), daemon=True)
        self.thread.start()

    def _run(self, fd: int) -> None:
        try:
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                with self.lock:
                    self.total += len(chunk)
                    self.buf += chunk
                    if len(self.buf) > 2 * self.cap:
                        del self.buf[: len(self.buf) - self.cap]
                    if self.watch:
                        self._scan(chunk)
            with self.lock:
                if self.watch:
                    self._scan(b"\n")
        finally:
            os.close(fd)

    def _scan(self, chunk: bytes) -> None:
        data = self.partial + chunk
        nl = data.rfind(b"\n")
        if nl < 0:  # keep only a line's start: that is where a marker sits
            self.partial = data[: self.LINE_CAP]
            return
        complete, self.partial = data[:nl], data[nl + 1:][: self.LINE_CAP]
        if self.watch in complete:
            for line in complete.split(b"\n"):
                if line.startswith(self.watch) and len(self.watched) < self.MAX_WATCHED:
                    self.watched.append(line[:300].decode("utf-8", errors="replace"))

    def reset(self, cap: int, watch: bytes = b"") -> None:
        with self.lock:
            self.cap, self.buf, self.total = cap, bytearray(), 0
            self.watch, self.partial, self.watched = watch, b"", []

    def text(self) -> str:
        with self.lock:
            data = bytes(self.buf[-self.cap:]) if self.cap else b""
        return data.decode("utf-8", errors="replace")
