"""Mapping logical parameter axes onto a device mesh with `data` and `model` axes.

Every parameter is created with logical axis names (`axes` metadata): `vocab`, `embed`,
`heads`, `kv_heads`, `mlp`, `norm`. Tensor parallelism puts `vocab`/`heads`/`kv_heads`/`mlp`
on the `model` axis; FSDP additionally puts `embed` on the `data` axis. A dimension that
does not divide by its mesh axis stays replicated, so any model runs on any mesh.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA, MODEL = "data", "model"

TP_RULES = {"vocab": MODEL, "heads": MODEL, "kv_heads": MODEL, "mlp": MODEL,
            "embed": None, "norm": None}
FSDP_RULES = dict(TP_RULES, embed=DATA)


def make_mesh(shape: Optional[Sequence[int]] = None, devices=None) -> Mesh:
    """A (data, model) mesh with Auto axis types. `shape=None` puts all devices on `data`."""
    devices = list(devices if devices is not None else jax.devices())
    if shape is None:
        shape = (len(devices), 1)
    shape = tuple(int(s) for s in shape)
    if int(np.prod(shape)) != len(devices):
        raise ValueError(f"mesh shape {shape} needs {int(np.prod(shape))} devices, "
                         f"but {len(devices)} are available.")
    arr = np.asarray(devices).reshape(shape)
    return Mesh(arr, (DATA, MODEL), axis_types=(jax.sharding.AxisType.Auto,) * 2)


def spec_for(names: Sequence[Optional[str]], shape: Sequence[int], mesh: Mesh,
             rules: Mapping[str, Optional[str]]) -> P:
    """PartitionSpec for one array: logical names -> mesh axes, replicated when indivisible."""
    axes = []
    used = set()
    for name, dim in zip(names, shape):
        axis = rules.get(name) if name else None
        if axis is None or axis in used or dim % mesh.shape[axis]:
            axes.append(None)
        else:
            axes.append(axis)
            used.add(axis)
    return P(*axes)


def variable_sharding(var, mesh: Mesh, fsdp: bool = False) -> NamedSharding:
    """NamedSharding for one nnx.Variable (or plain array: replicated)."""
    rules = FSDP_RULES if fsdp else TP_RULES
    if not isinstance(var, nnx.Variable):
        return NamedSharding(mesh, P())
    names = var.get_metadata().get("axes")
    if not names:
        return NamedSharding(mesh, P())
    return NamedSharding(mesh, spec_for(names, var.get_value().shape, mesh, rules))


def param_shardings(state: nnx.State, mesh: Mesh, fsdp: bool = False):
    """A tree like `state` with a NamedSharding in place of every variable."""
    return jax.tree.map(lambda v: variable_sharding(v, mesh, fsdp), state,
                        is_leaf=lambda x: isinstance(x, nnx.Variable))


def shard_model(model: nnx.Module, mesh: Mesh, fsdp: bool = False) -> nnx.Module:
    """Place a model's parameters on `mesh` (in place) and return it."""
    graphdef, state = nnx.split(model)
    shardings = param_shardings(state, mesh, fsdp)
    state = jax.device_put(state, shardings)
    nnx.update(model, state)
    return model


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """Leading (batch) axis over `data`, the rest replicated."""
    return NamedSharding(mesh, P(DATA, *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())
