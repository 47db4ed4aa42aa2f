"""Multi-host scale-out: `jax.distributed` start-up, global batches, host-local sampling.

One program runs on every host (process). The learner's mesh spans all devices of all hosts
(`jax.devices()` is ordered by process, so with `make_mesh((data, model))` and `model` ≤ the
devices of one host, `model` stays inside a host and `data` crosses hosts). Every jitted call
on that mesh is one SPMD program that all processes must enter together, in the same order,
with the same shapes.

* Learner: each host contributes its own rows; `global_batch` assembles them into global
  arrays sharded over `data` (host p owns the rows `local_rows(mesh, B)` of the global batch).
* Sampler: each host samples its own prompts for its own actors, asynchronously, so it must
  not run on the global mesh (that would put every host in lockstep on every decode step).
  It runs on `host_local_mesh()` with a host-local copy of the policy made once per policy
  version by `to_host_local` (an all-gather, itself a lockstep collective: call it right
  after `Learner.update`, which is lockstep anyway).

On CPU, cross-process collectives go through gloo (TCP), selected in `initialize`.
"""

from __future__ import annotations

import functools
from typing import Mapping, Optional, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from mle_rl.models import sharding as shd


def initialize(cfg, *, cpu_devices: Optional[int] = None) -> None:
    """Start `jax.distributed` when `cfg.num_processes > 1`; call before any other JAX call.

    cfg: anything with `coordinator_address` ("host:port"), `num_processes`, `process_id`.
    cpu_devices: on CPU, how many devices this process exposes (default: JAX's, i.e. 1 or
    what XLA_FLAGS=--xla_force_host_platform_device_count says).
    """
    if cpu_devices is not None:
        jax.config.update("jax_num_cpu_devices", int(cpu_devices))
    if cfg.num_processes <= 1:
        return
    if not cfg.coordinator_address:
        raise ValueError("--num_processes > 1 needs --coordinator_address=host:port.")
    # Cross-process collectives on the CPU backend need an implementation; gloo ships with
    # jaxlib. It is jax 0.10's default; unset (older jax), the CPU backend would start but
    # fail at the first cross-process collective.
    if jax.config.jax_cpu_collectives_implementation is None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(coordinator_address=cfg.coordinator_address,
                                   num_processes=cfg.num_processes, process_id=cfg.process_id)
    except Exception as e:   # noqa: BLE001 - re-raised with the flags that caused it
        raise RuntimeError(
            f"jax.distributed could not start process {cfg.process_id} of {cfg.num_processes} "
            f"with coordinator {cfg.coordinator_address}: {e}. Check that every process gets the "
            "same --coordinator_address and --num_processes and a distinct --process_id, and that "
            "process 0 is running.") from e


def is_coordinator() -> bool:
    """True on process 0 (the one that logs, writes summaries and saves exports)."""
    return jax.process_index() == 0


def barrier(name: str) -> None:
    """Block until every process reaches the barrier called `name` (no-op single-process)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def host_local_mesh(model: int = 1) -> Mesh:
    """A (data, model) mesh over this process's devices only: the sampler's mesh."""
    n = jax.local_device_count()
    if n % model:
        raise ValueError(f"host_local_mesh: model={model} does not divide this host's {n} "
                         "devices; pick a model size that does.")
    return shd.make_mesh((n // model, model), jax.local_devices())


def local_rows(mesh: Mesh, global_rows: int) -> slice:
    """The rows of a `[global_rows, ...]` batch that this process feeds on `mesh`.

    They are contiguous: `data` shards owned by one process are adjacent when the mesh is
    built from `jax.devices()` (ordered by process).
    """
    sharding = shd.batch_sharding(mesh, 1)
    idx = sharding.addressable_devices_indices_map((global_rows,)).values()
    starts = sorted({s[0].start or 0 for s in idx})
    stops = sorted({global_rows if s[0].stop is None else s[0].stop for s in idx})
    if any(b != a for a, b in zip(stops[:-1], starts[1:])):
        raise ValueError("local_rows: this process's data shards are not contiguous; build the "
                         "mesh from jax.devices() in their default (process-major) order.")
    return slice(starts[0], stops[-1])


def global_batch(local_batch: Mapping[str, np.ndarray], mesh: Mesh,
                 keys: Optional[Sequence[str]] = None) -> dict:
    """Host-local rows -> global arrays sharded over `data` (batch axis first).

    local_batch: {name: [b, ...]} with the same b and dtypes on every process. The global
    arrays are [B, ...] with B = b · (size of `data`) / (positions of `data` on this host),
    i.e. b · processes when `data` spans the hosts; this process's rows are
    `local_rows(mesh, B)`. Single-process, this is a plain `device_put` with the batch
    sharding. Every process must call it (and the update that follows) in the same order.
    """
    keys = list(keys if keys is not None else local_batch)
    out = {}
    for k in keys:
        x = np.asarray(local_batch[k])
        sharding = shd.batch_sharding(mesh, x.ndim)
        if jax.process_count() == 1:
            out[k] = jax.device_put(x, sharding)
            continue
        local_shards = _local_data_shards(mesh)
        if x.shape[0] % local_shards:
            raise ValueError(f"global_batch: {k!r} has {x.shape[0]} local rows, not divisible by "
                             f"this host's {local_shards} data shards; feed a multiple.")
        out[k] = jax.make_array_from_process_local_data(sharding, x)
    return out


def _local_data_shards(mesh: Mesh) -> int:
    """How many positions of the `data` axis hold a device of this process."""
    me = jax.process_index()
    data_axis = mesh.axis_names.index(shd.DATA)
    return len({ix[data_axis] for ix, d in np.ndenumerate(mesh.devices) if d.process_index == me})


@functools.lru_cache(maxsize=None)
def _replicate_fn(mesh: Mesh):
    """A jitted identity whose outputs are replicated on every device of `mesh`."""
    return jax.jit(lambda tree: tree, out_shardings=NamedSharding(mesh, P()))


def to_host_local(tree, local_mesh: Mesh):
    """Copy a tree of global arrays (e.g. `learner.state.policy`) onto `local_mesh`.

    Leaves whose sharding already lies on `local_mesh`'s devices are returned as they are
    (the single-process case). Otherwise each leaf is all-gathered across processes (a
    collective: every process must call this, with the same tree) and placed on the local
    mesh with the same logical layout `models.sharding` would give, replicated where the
    global layout split over hosts. Arrays of the result: same shapes and dtypes.
    """
    local_devices = set(local_mesh.devices.flat)
    leaves, treedef = jax.tree.flatten(tree)
    moving = [i for i, x in enumerate(leaves)
              if isinstance(x, jax.Array) and not set(x.sharding.device_set) <= local_devices]
    if not moving:
        return tree
    meshes = {leaves[i].sharding.mesh for i in moving}
    if len(meshes) != 1:
        raise ValueError("to_host_local: the arrays live on more than one mesh; pass one "
                         "learner state at a time.")
    # One jitted all-gather for the whole tree; then every addressable shard is the whole value.
    full = _replicate_fn(meshes.pop())([leaves[i] for i in moving])
    out = list(leaves)
    for i, f in zip(moving, full):
        value = f.addressable_shards[0].data
        out[i] = jax.device_put(value, NamedSharding(local_mesh, _local_spec(leaves[i], local_mesh)))
    return jax.tree.unflatten(treedef, out)


def _local_spec(x: jax.Array, local_mesh: Mesh) -> P:
    """Keep the global spec's `model` axis when the local mesh can hold it, drop `data`."""
    spec = getattr(x.sharding, "spec", P())
    axes = []
    for axis, dim in zip(tuple(spec) + (None,) * (x.ndim - len(spec)), x.shape):
        keep = axis == shd.MODEL and dim % local_mesh.shape[shd.MODEL] == 0
        axes.append(shd.MODEL if keep else None)
    return P(*axes)


def fetch(tree):
    """A tree of global arrays -> numpy on every process (all-gathers sharded leaves)."""
    if jax.process_count() == 1:
        return jax.tree.map(np.asarray, jax.device_get(tree))
    return jax.tree.map(lambda x: np.asarray(multihost_utils.process_allgather(x, tiled=True)),
                        tree)


def allgather_host(x) -> np.ndarray:
    """`[processes, ...]`: every process's `x` (same shape and dtype on all), stacked in
    process order, on every process. A collective when multi-process."""
    x = np.asarray(x)
    if jax.process_count() == 1:
        return x[None]
    return np.asarray(multihost_utils.process_allgather(x, tiled=False))


def allgather_objects(obj) -> list:
    """Every process's picklable `obj`, in process order, on every process (for host state
    of different sizes, e.g. replay buffers in a checkpoint). A collective."""
    if jax.process_count() == 1:
        return [obj]
    import pickle

    blob = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    sizes = allgather_host(np.int64(blob.size))
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[:blob.size] = blob
    rows = allgather_host(padded)
    return [pickle.loads(rows[i, :int(n)].tobytes()) for i, n in enumerate(sizes)]
