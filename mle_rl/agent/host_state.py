"""What a checkpoint holds of the trainer besides the learner's arrays, and how it comes back.

`Trainer` inherits these: `save_checkpoint` (a collective when multi-process: every
process's host state is gathered into process 0's checkpoint), `_host_state` (the archive,
counters, best scores, families, random states, the replay buffer, the config) and
`_restore` (`--resume`: the checkpoint, its config checked against the flags, every part
put back).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from mle_rl import config
from mle_rl.io import checkpoint as ckpt
from mle_rl.runtime import distributed, peers


class HostState:
    """Mixin of `Trainer` (uses its cfg, learner, checkpointer, archive, buffer, counters,
    rng and sample key)."""

    def save_checkpoint(self, force: bool = False):
        """On every process (a collective when multi-process: each one's host state is
        gathered so that process 0's checkpoint holds all of them)."""
        if not self.checkpointer.should_save(self.step, force):
            return
        self._enter_phase("checkpoint")     # the update's cached pages, before the host copy
        extra = self._host_state()
        if self.nproc > 1:
            extra = {"hosts": distributed.allgather_objects(extra), "config": extra["config"]}
        peers.fault_point("checkpoint", self.step)
        self.checkpointer.save(self.step, self.learner.state, extra, force=force)

    def _host_state(self) -> dict:
        """What a checkpoint holds besides the learner's state."""
        return {
            "archive": self.archive.state_dict(),
            "counters": dict(self.counters),
            "best": self.best,
            "families": dict(self.family_counts),
            "host_rng": self.rng.bit_generator.state,
            "sample_key": np.asarray(self.sample_key),
            "buffer": self.buffer.state_dict(),
            "config": self.cfg.to_dict(),
        }

    def _restore(self):
        """Loads checkpoint `--resume_step` (default: the latest). Resuming below the latest,
        the later checkpoints are moved aside (one warning line says where) once the restore
        has succeeded, so this run writes those steps anew and a later `--resume` finds
        them; `MetricsLogger(resume_step=...)` likewise drops the metrics after the step."""
        latest = self.cfg.resume_step
        if latest is None:
            latest = self.checkpointer.latest_step()
        if latest is None:
            raise ckpt.CheckpointError(
                f"--resume: no checkpoint in {self.workdir / 'checkpoints'}; run without "
                f"--resume to start fresh.")
        state, extra = self.checkpointer.restore(latest, abstract_state=self.learner.state)
        hosts = extra.get("hosts")
        if (len(hosts) if hosts is not None else 1) != self.nproc:
            raise ckpt.CheckpointError(
                f"checkpoint {latest} in {self.workdir / 'checkpoints'} was written by "
                f"{len(hosts) if hosts is not None else 1} process(es); resume it with the same "
                f"--num_processes (now {self.nproc}).")
        if hosts is not None:
            extra = {**hosts[self.proc], "config": extra["config"]}
        # What shapes the saved arrays and the archive must match; the rest may change.
        saved_config = config.with_added_defaults(extra.get("config", {}))
        ckpt.check_compatible(saved_config, self.cfg.to_dict(),
                              directory=self.workdir / "checkpoints", step=latest,
                              keys=config.RESUME_MUST_MATCH)
        self.learner.state = state
        self._refresh_sampler()
        self.archive.load_state_dict(extra["archive"])
        self.counters = Counter(extra["counters"])
        self.best = dict(extra["best"])
        self.family_counts = Counter(extra["families"])
        self.rng.bit_generator.state = extra["host_rng"]
        self.sample_key = np.asarray(extra["sample_key"], np.uint32)
        self.buffer.load_state_dict(extra["buffer"])
        moved, where = self.checkpointer.discard_after(latest)
        distributed.barrier("resume_discard_after")     # every process sees the same steps
        if moved and self.proc == 0:
            self.log(f"[resume] warning: resuming from checkpoint {latest}, below the latest "
                     f"{moved[-1]}: moved checkpoint(s) {moved} to {where} (this run writes "
                     f"them anew; metrics.jsonl continues after step {latest})")
        self.log(f"[resume] continuing at update {self.step} from {self.workdir}")
