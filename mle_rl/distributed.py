"""Multi-host start-up: `jax.distributed` when a coordinator is given, else nothing."""

from __future__ import annotations


def initialize(cfg) -> None:
    """Call once, before any other JAX call, with the run's config."""
    if cfg.num_processes <= 1:
        return
    import jax
    jax.distributed.initialize(coordinator_address=cfg.coordinator_address,
                               num_processes=cfg.num_processes, process_id=cfg.process_id)
