"""Built-in offline tasks, made from data that ships inside installed packages.

`SPECS` maps a task id to its `BuiltinSpec`; `tasks.prepare` writes one to the cache.
"""

from mle_rl.env.builtin import images, synth, tabular, text
from mle_rl.env.builtin.spec import BuiltinSpec

SPECS: dict = {s.id: s for mod in (tabular, images, text, synth) for s in mod.SPECS}

__all__ = ["BuiltinSpec", "SPECS"]
