"""`BuiltinSpec`: what a built-in task is before it is written to disk."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import pathlib
import platform
from typing import Callable

from mle_rl.env.graders import TableGrader
from mle_rl.env.metrics import METRICS


@dataclasses.dataclass(frozen=True)
class BuiltinSpec:
    """A built-in task: metadata, its grader and `build(root)`, which writes the task files.

    version: bump when `build` changes, so cached copies are prepared again.
    packages: distributions whose versions the data depends on (e.g. docstrings of numpy);
    their versions go into the cache marker too.
    """

    id: str
    metric: str
    modality: str
    grader: TableGrader
    build: Callable[[pathlib.Path], None]
    version: int = 1
    timeout_s: float = 60.0
    memory_mb: int = 2048
    reward_scale: float = 1.0
    packages: tuple = ()

    @property
    def is_lower_better(self) -> bool:
        return METRICS[self.metric]

    def fingerprint(self) -> dict:
        """What a prepared copy must match to be reused: id, builder version, package versions."""
        versions = {}
        for dist in self.packages:
            if dist == "python":
                versions[dist] = platform.python_version()
                continue
            try:
                versions[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                versions[dist] = None
        return {"id": self.id, "version": self.version, "packages": versions}
