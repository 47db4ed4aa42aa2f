"""The process allocator: tcmalloc through a re-exec when installed, never in the sandbox."""

import os
import subprocess
import sys

from mle_rl.runtime import allocator
from mle_rl.env import sandbox_fs

_PROBE = ("import sys; sys.path.insert(0, {root!r}); from mle_rl.runtime import allocator; "
          "allocator.reexec_with_tcmalloc(); print(allocator.loaded() or 'none'); "
          "print(sys.argv[1:])")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _probe(env_extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", allocator.ENV_CHOICE, "MLE_RL_MALLOC_REEXEC")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", _PROBE.format(root=_ROOT), "a", "--b=1"],
                         env=env, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.split("\n")[:2]


def test_reexec_preloads_tcmalloc_when_installed_and_keeps_the_arguments():
    name, args = _probe({})
    assert args == "['a', '--b=1']"
    if allocator.find_tcmalloc() is None:   # e.g. no apt: nothing changes, no error
        assert name == "none"
    else:
        assert name == "tcmalloc"


def test_system_choice_keeps_glibc_malloc():
    name, args = _probe({allocator.ENV_CHOICE: "system"})
    assert name == "none" and args == "['a', '--b=1']"


def test_setup_installs_tcmalloc_here():
    # launch/setup.sh installs libtcmalloc-minimal4 where apt-get runs as root (CI does).
    if os.geteuid() == 0 and os.path.exists("/usr/bin/apt-get"):
        assert allocator.find_tcmalloc() is not None


def test_generated_code_does_not_inherit_the_preload():
    env = sandbox_fs.sandbox_env(1, "/work")
    assert "LD_PRELOAD" not in env and not any(k.startswith("MLE_RL_") for k in env)
