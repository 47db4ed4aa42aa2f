"""Orbax checkpoints of the trainer: the learner's `TrainState` plus the host state.

One checkpoint is the directory `DIR/<step>/`, written by an orbax `CheckpointManager` as
three items (their encoding is in `checkpoint_format`):

  train_state   `StandardSave` of the state flattened to `{"policy.layers.0.attn.q_kernel":
                array, ...}`; restored onto the shardings of an abstract state (any mesh)
                and unflattened with its tree structure, int dict keys included.
  host_arrays   `StandardSave` of the numpy arrays found in `extra` (buffer, numpy RNG);
                absent when there are none.
  meta          `JsonSave`: format version, the step, every train-state path with its shape,
                dtype and checksum, and `extra` with each array replaced by a reference.

Invariant (kill -9 at any moment): every step `all_steps()` lists is complete.
  * Writing: orbax writes a step to `DIR/<step>.orbax-checkpoint-tmp*` and renames it to
    `DIR/<step>` only once every item is on disk; a save killed half-way leaves a temp
    directory that is never listed (the next `Checkpointer` deletes it).
  * Deleting (beyond `keep`): orbax first renames `DIR/<step>` to `DIR/.trash/<step>`
    (`todelete_subdir`), then this class deletes what is in `.trash`: after each save, and
    at open, for what a kill left there. A step is never deleted in place.
  * Resuming below the latest step: `discard_after(step)` moves the later steps into
    `DIR/discarded-<time>/` (kept, not listed), so the resumed run writes them anew.

Saving under SIGTERM/SIGINT: let the handler only set a flag; the loop then calls
`save(step, state, extra, force=True)` and `wait()`. `save` refuses to be re-entered (as it
would be if called from a handler that interrupted a save), and saving a step that is
already saved or pending is a no-op.

Errors are `CheckpointError`, one sentence naming the directory and step and what to do: a
missing, corrupt (unreadable, or failing its checksums) or incompatible checkpoint never
turns into a silent fresh start, and a damaged latest step is not silently skipped either.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import time
import warnings
from typing import Any, Iterable, Optional, Sequence

import jax
import numpy as np
import orbax.checkpoint as ocp

from mle_rl.io import checkpoint_format as fmt
from mle_rl.io import disk
from mle_rl.io.checkpoint_format import MAY_CHANGE, ConfigDiff, compatible  # noqa: F401

FORMAT_VERSION = 1
_STATE, _ARRAYS, _META = "train_state", "host_arrays", "meta"
_TRASH = ".trash"           # old steps, renamed out of the listed namespace before deletion


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: missing, incomplete/corrupt, or incompatible."""


class Checkpointer:
    """Saves and restores `(train_state, extra)` under `directory`, one sub-directory a step.

    Args:
      directory: where the steps go (created if missing).
      keep: how many most recent checkpoints to keep (older ones are deleted).
      every: `save` writes only when `step % every == 0` (or `force=True`).
      async_save: write in a background thread; `save` returns once the arrays are copied
        to host memory, so the caller may donate/overwrite them right after. Call `wait()`
        before reading the files or exiting.
    """

    def __init__(self, directory, *, keep: int = 3, every: int = 1, async_save: bool = False):
        if keep < 1 or every < 1:
            raise ValueError(f"keep and every must be >= 1, got keep={keep}, every={every}.")
        self.directory = os.path.abspath(os.fspath(directory))
        self.every = int(every)
        self._existed = os.path.isdir(self.directory)
        self._saving = False
        self._requested: set = set()     # steps handed to orbax (an async one may be pending)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, todelete_subdir=_TRASH, save_interval_steps=1, create=True,
            cleanup_tmp_directories=True, enable_async_checkpointing=async_save)
        try:
            self._manager = ocp.CheckpointManager(self.directory, options=options,
                                                  item_names=(_STATE, _ARRAYS, _META))
        except Exception as e:  # noqa: BLE001 - any orbax/filesystem failure, said plainly
            raise CheckpointError(f"cannot open the checkpoint directory {self.directory} "
                                  f"({type(e).__name__}: {_first_line(e)}); check that it is a "
                                  "writable directory.") from e
        self._empty_trash()
        _silence_abandoned_reads()     # a failed write (a full disk) leaves the same echoes

    # -- queries ---------------------------------------------------------------------------

    def all_steps(self) -> list[int]:
        """Committed steps, ascending (temp directories of unfinished saves excluded)."""
        self._manager.reload()
        return sorted(int(s) for s in self._manager.all_steps())

    def latest_step(self) -> Optional[int]:
        steps = self.all_steps()
        return steps[-1] if steps else None

    def should_save(self, step: int, force: bool = False) -> bool:
        """Whether `save(step, ...)` would write (lets the caller skip building `extra`)."""
        return ((force or step % self.every == 0) and step not in self._requested
                and step not in self.all_steps())

    # -- save --------------------------------------------------------------------------------

    def save(self, step: int, train_state, extra: Optional[dict] = None, *,
             force: bool = False) -> bool:
        """Writes checkpoint `step`; returns False when skipped (not due, or already there).

        train_state: any pytree of jax arrays (e.g. `learner.TrainState`).
        extra: host state: JSON types and numpy arrays, nested in dicts/lists. Tuples come
          back as lists; numpy scalars as numpy scalars of the same dtype.
        """
        step = int(step)
        if self._saving:
            raise RuntimeError("Checkpointer.save was re-entered (called from a signal handler "
                               "during a save?); set a flag in the handler and save from the "
                               "training loop instead.")
        if not self.should_save(step, force):
            return False
        self._saving = True
        try:
            flat, _ = fmt.flatten_state(train_state)
            for k, v in flat.items():
                if not hasattr(v, "shape") or not hasattr(v, "dtype"):
                    raise ValueError(f"train-state leaf {k} is a {type(v).__name__}; the train "
                                     "state must hold arrays (put Python values in extra).")
            arrays: dict = {}
            sums = fmt.state_checksums(flat)
            encoded = fmt.encode_extra(dict(extra or {}), "", arrays)
            meta = {
                "format": FORMAT_VERSION,
                "step": step,
                "train_state": [[k, list(v.shape), fmt.dtype_name(v.dtype), sums[k]]
                                for k, v in flat.items()],
                "extra": encoded,
            }
            meta["crc32"] = fmt.json_checksum(meta)
            items = {_STATE: ocp.args.StandardSave(flat), _META: ocp.args.JsonSave(meta)}
            if arrays:
                items[_ARRAYS] = ocp.args.StandardSave(arrays)
            try:
                self._manager.save(step, args=ocp.args.Composite(**items), force=True)
            except Exception as e:  # noqa: BLE001
                raise self._write_failed(step, e) from e
            self._requested.add(step)
            self._empty_trash()     # sync: this save's old steps; async: the previous one's
        finally:
            self._saving = False
        return True

    def wait(self) -> None:
        """Blocks until an asynchronous save is committed."""
        try:
            self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001
            pending = sorted(self._requested - set(self.all_steps()))
            raise self._write_failed(pending[-1] if pending else None, e) from e
        self._empty_trash()

    def close(self) -> None:
        self.wait()
        self._manager.close()

    def _empty_trash(self) -> None:
        """Deletes the old steps orbax renamed into `DIR/.trash` (on process 0, as orbax
        deletes); only its entries: an async save's thread may be renaming into it."""
        trash = os.path.join(self.directory, _TRASH)
        if jax.process_index() != 0 or not os.path.isdir(trash):
            return
        for name in os.listdir(trash):
            shutil.rmtree(os.path.join(trash, name), ignore_errors=True)

    def discard_after(self, step: int) -> tuple[list, Optional[str]]:
        """Moves the steps above `step` into a new `DIR/discarded-<time>/` (on process 0;
        call it on all, then a barrier), so that a run resumed from `step` writes them anew
        rather than skip them as saved; returns (moved steps, that dir) or ([], None)."""
        self.wait()
        later = [s for s in self.all_steps() if s > int(step)]
        if not later:
            return [], None
        dest = os.path.join(self.directory, time.strftime("discarded-%Y%m%d-%H%M%S"))
        if jax.process_index() == 0:
            base, n = dest, 1
            while os.path.exists(dest):
                n += 1
                dest = f"{base}-{n}"
            os.makedirs(dest)
            for s in reversed(later):         # each step is listed whole or not at all
                os.rename(os.path.join(self.directory, str(s)), os.path.join(dest, str(s)))
        self._requested -= set(later)
        self._manager.reload()
        return later, dest

    def _write_failed(self, step, e: BaseException) -> Exception:
        """The error of a failed save: for a full disk (`disk.DiskFullError`), after the
        save's half-written temporary directory is removed (room for the next try)."""
        if disk.is_disk_full(e):
            for name in os.listdir(self.directory):
                if step is not None and name.startswith(f"{step}.orbax-checkpoint-tmp"):
                    shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)
            intact = [s for s in self.all_steps() if step is None or s < step]
            after = (f"checkpoint {intact[-1]} is intact." if intact
                     else "no checkpoint had been written yet.")
            return disk.disk_full(self.directory, f"checkpoint {step}", after)
        return CheckpointError(
            f"could not write checkpoint{'' if step is None else f' {step}'} to {self.directory} "
            f"({type(e).__name__}: {_first_line(e)}); check its free space and permissions.")

    # -- restore -----------------------------------------------------------------------------

    def _resolve_step(self, step: Optional[int]) -> int:
        steps = self.all_steps()
        if step is None:
            if not steps:
                why = "exists but holds none" if self._existed else "does not exist"
                raise CheckpointError(f"no checkpoint to resume from: {self.directory} {why}; "
                                      "run without --resume to start fresh, or point --workdir "
                                      "at the run to continue.")
            return steps[-1]
        step = int(step)
        if step not in steps:
            raise CheckpointError(f"checkpoint {step} is not in {self.directory} (it has "
                                  f"{steps or 'none'}); pick one of those steps.")
        return step

    def _corrupt(self, step: int, e: BaseException) -> CheckpointError:
        _ABANDONED["reads"] = True      # its echoes are dropped from now on
        warnings.filterwarnings("ignore", r"coroutine '.*' was never awaited", RuntimeWarning)
        older = [s for s in self.all_steps() if s < step]
        hint = f" or pass --resume_step={older[-1]}" if older else ""
        return CheckpointError(
            f"checkpoint {step} in {self.directory} is incomplete or corrupt "
            f"({type(e).__name__}: {_first_line(e)}); delete {self.directory}/{step}{hint}.")

    def _read_meta(self, step: int) -> dict:
        """The first read of every restore path (read_extra, restore, verify)."""
        _silence_abandoned_reads()
        try:
            out = self._manager.restore(step, args=ocp.args.Composite(
                **{_META: ocp.args.JsonRestore()}))
            meta = out[_META]
            if not isinstance(meta, dict) or "format" not in meta:
                raise ValueError("its meta item is missing or not a mle_rl checkpoint")
            if meta["format"] == FORMAT_VERSION:
                body = {k: v for k, v in meta.items() if k != "crc32"}
                if fmt.json_checksum(body) != meta["crc32"]:
                    raise ValueError("the meta item (host state, array list) fails its checksum")
                if meta["step"] != step:
                    raise ValueError(f"its meta item says step {meta['step']}")
        except CheckpointError:
            raise
        except Exception as e:  # noqa: BLE001
            raise self._corrupt(step, e) from e
        if meta["format"] != FORMAT_VERSION:
            raise CheckpointError(
                f"checkpoint {step} in {self.directory} has format {meta['format']}, this "
                f"code reads format {FORMAT_VERSION}; restore it with the matching mle_rl "
                "version or start a new workdir.")
        return meta

    def _restore_extra(self, step: int, meta: dict) -> dict:
        refs = [r for r in fmt.array_refs(meta["extra"], []) if r[fmt.ARRAY_TAG] is not None]
        arrays = {}
        if refs:
            target = {r[fmt.ARRAY_TAG]: np.empty(r["shape"], np.dtype(r["dtype"])) for r in refs}
            out = self._manager.restore(step, args=ocp.args.Composite(
                **{_ARRAYS: ocp.args.StandardRestore(target)}))
            arrays = out[_ARRAYS]
        return fmt.decode_extra(meta["extra"], arrays)

    def read_extra(self, step: Optional[int] = None) -> dict:
        """Only the host state of checkpoint `step` (latest when None), e.g. its config, to
        check compatibility before building the model."""
        step = self._resolve_step(step)
        meta = self._read_meta(step)
        try:
            return self._restore_extra(step, meta)
        except Exception as e:  # noqa: BLE001
            raise self._corrupt(step, e) from e

    def verify(self, step: Optional[int] = None) -> int:
        """Reads checkpoint `step` (latest when None) in full onto the default device, with
        the shapes it was saved with, and checks every checksum; returns the step. Raises
        CheckpointError as `restore` does. Needs no model (e.g. to check a run directory)."""
        step = self._resolve_step(step)
        nested: dict = {}
        for key, shape, dtype, _ in self._read_meta(step)["train_state"]:
            *parents, leaf = key.split(".")
            node = nested
            for name in parents:
                node = node.setdefault(name, {})
            node[leaf] = jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))
        self.restore(step, abstract_state=nested)
        return step

    def restore(self, step: Optional[int] = None, *, abstract_state) -> tuple[Any, dict]:
        """Loads checkpoint `step` (latest when None) -> (train_state, extra).

        abstract_state: the live state, or a pytree of `jax.ShapeDtypeStruct` with
          `.sharding` (e.g. `jax.eval_shape` output with shardings); the restored arrays get
          its shardings (any mesh: a 1-device checkpoint restores onto a 2x2 mesh and back)
          and the result has exactly its tree structure.
        Raises CheckpointError when there is no such checkpoint, when it is corrupt, or when
        its arrays do not match `abstract_state` (naming the first differing path).
        """
        step = self._resolve_step(step)
        meta = self._read_meta(step)
        flat_abs, treedef = fmt.flatten_state(abstract_state)
        flat_abs = {k: fmt.abstract_leaf(v) for k, v in flat_abs.items()}
        diff = fmt.first_difference(meta["train_state"], flat_abs)
        if diff:
            raise CheckpointError(
                f"checkpoint {step} in {self.directory} is incompatible with the current train "
                f"state: {diff}; restore with the model/optimizer config it was saved with, or "
                "start a new workdir.")
        try:
            out = self._manager.restore(step, args=ocp.args.Composite(
                **{_STATE: ocp.args.StandardRestore(flat_abs)}))
            flat = out[_STATE]
            for k, a in flat_abs.items():
                got = flat[k]
                if tuple(got.shape) != a.shape or got.dtype != a.dtype:
                    raise ValueError(f"{k} came back as {got.dtype}{list(got.shape)}")
            sums = fmt.state_checksums({k: flat[k] for k in flat_abs})
            saved_sums = {row[0]: row[3] for row in meta["train_state"]}
            bad = [k for k in flat_abs if sums[k] != saved_sums[k]]
            if bad:
                raise ValueError(f"{bad[0]} fails its checksum ({len(bad)} arrays do)")
            state = jax.tree_util.tree_unflatten(treedef, [flat[k] for k in flat_abs])
            extra = self._restore_extra(step, meta)
        except CheckpointError:
            raise
        except Exception as e:  # noqa: BLE001
            raise self._corrupt(step, e) from e
        return state, extra


def _first_line(e: BaseException, limit: int = 200) -> str:
    text = str(e).strip().splitlines()
    text = text[0] if text else ""
    return text if len(text) <= limit else text[:limit] + "..."


_ABANDONED = {"reads": False}     # set by the first failed read of this process


class _DropAbandonedReads(logging.Filter):
    """Drops asyncio's reports of the tasks a failed read left behind."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (_ABANDONED["reads"] and ("exception was never retrieved" in text
                                            or "was destroyed but it is pending" in text))


def _silence_abandoned_reads() -> None:
    """Keeps a failed restore to its one clear error (installed before the first read).

    When one array fails to read, orbax's `asyncio.gather` raises at once and closes its
    event loop while the other reads are in flight. Their echoes follow: each tensorstore
    completion's `call_soon_threadsafe` raises "Event loop is closed" (`sys.unraisablehook`),
    and the abandoned coroutines, tasks and futures, when collected (often at exit), each
    report the read error again or warn they were never awaited: dozens of tracebacks.
    Closed-loop reports are always dropped (they are only ever such echoes), the others
    once a read has failed (`_ABANDONED`, set with the warnings filter by `_corrupt`)."""
    previous = sys.unraisablehook
    if getattr(previous, "_drops_abandoned_reads", False):
        return

    def hook(unraisable):
        e, obj = unraisable.exc_value, unraisable.object
        closed_loop = (obj is None and isinstance(e, RuntimeError)
                       and str(e) == "Event loop is closed")
        abandoned = _ABANDONED["reads"] and asyncio.iscoroutine(obj)
        if not (closed_loop or abandoned):
            previous(unraisable)

    hook._drops_abandoned_reads = True
    sys.unraisablehook = hook
    logging.getLogger("asyncio").addFilter(_DropAbandonedReads())


class _DropOrbaxInfo(logging.Filter):
    def __init__(self, level: int):
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        path = record.pathname.replace(os.sep, "/")
        return record.levelno >= self.level or "/orbax/" not in path


def quiet_orbax_logging(level: int = logging.WARNING) -> None:
    """Drops orbax's log records below `level` (about a hundred INFO lines a save under
    absl.app); other libraries' logging is untouched. Idempotent."""
    logger = logging.getLogger("absl")
    if not any(isinstance(f, _DropOrbaxInfo) for f in logger.filters):
        logger.addFilter(_DropOrbaxInfo(level))
    disk.quiet_write_failures()


# ---------------------------------------------------------------------------------------
# Config compatibility on resume (`compatible`, `ConfigDiff`, `MAY_CHANGE`: checkpoint_format).


def check_compatible(config_saved: dict, config_now: dict, *, directory, step: int,
                     keys: Optional[Sequence[str]] = None,
                     may_change: Iterable[str] = MAY_CHANGE) -> ConfigDiff:
    """`compatible`, raising CheckpointError (naming the checkpoint) when it is not."""
    diff = compatible(config_saved, config_now, keys, may_change=may_change)
    if not diff.ok:
        raise CheckpointError(
            f"checkpoint {step} in {directory} was made with a different config "
            f"({diff.describe()}); resume with the same settings or start a new workdir.")
    return diff
