"""The process the library runs in.

    distributed.py   multi-host JAX: start-up, global batches, host-local sampling copies
    allocator.py     re-execute with tcmalloc (XLA:CPU temporaries without page faults)
"""
