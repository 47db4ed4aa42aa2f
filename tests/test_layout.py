"""The package's shape: imports run one way, no module imports itself back, files stay small.

Every module of `mle_rl` is parsed with `ast` (nothing is imported), and every import in it
counts, at the top of the file or inside a function: `import mle_rl.x.y`,
`from mle_rl.x import y`, `from . import y`, `from ..x import y`.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mle_rl"
MAX_LINES = 450

# The layers of `mle_rl/__init__.py`'s docstring, top to bottom. A unit (a subpackage, or a
# top-level module) may import from the layers below its own, never a neighbour in its
# layer, never a layer above.
LAYERS = (
    ("agent", "__main__"),
    ("config",),
    ("warmstart", "io"),
    ("sampling", "rl"),
    ("runtime",),
    ("models", "env"),
)
MAY_IMPORT = {unit: {low for lower in LAYERS[i + 1:] for low in lower}
              for i, layer in enumerate(LAYERS) for unit in layer}
# So, spelled out:
#   agent, __main__ -> config, warmstart, io, sampling, rl, runtime, models, env
#   config          -> warmstart, io, sampling, rl, runtime, models, env
#   warmstart, io   -> sampling, rl, runtime, models, env
#   sampling, rl    -> runtime, models, env
#   runtime         -> models, env
#   models, env     -> (nothing else of mle_rl)
JAX_LIBS = ("jax", "jaxlib", "flax", "optax", "chex", "orbax")


def _modules() -> dict:
    """{dotted name: path} of every module of the package (a package is its __init__)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: pathlib.Path) -> list:
    return _imports_of(path.read_text(), name, is_package=path.name == "__init__.py")


def _imports_of(source: str, name: str, is_package: bool = False) -> list:
    """(imported name, line) of every import in module `name`'s source, resolved to
    absolute names: `from a import b` gives `a.b` when that is a module, else `a`."""
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((sub if sub in MODULES else base, node.lineno))
    return found


def _graph() -> dict:
    """{module: {imported mle_rl module: first line}} (the module itself left out)."""
    graph = {}
    for name, path in MODULES.items():
        edges = graph.setdefault(name, {})
        for target, line in _imports(name, path):
            while target and target not in MODULES:     # mle_rl.x.y.Name -> mle_rl.x.y
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.setdefault(target, line)
    return graph


def _unit(module: str):
    """'mle_rl.agent.trainer' -> 'agent'; 'mle_rl.sampling' -> 'sampling'; root -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _cycle(graph: dict):
    """One import cycle as [a, b, ..., a], or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_parser_sees_every_kind_of_import():
    source = ("import mle_rl.env.tasks\n"
              "from mle_rl import sampling\n"
              "from mle_rl.agent.actors import ActorPool\n"
              "from . import buffer\n"
              "from .prompt_sources import signed\n"
              "from .. import config\n"
              "def f():\n"
              "    from mle_rl.io import policy as p\n")
    found = [n for n, _ in _imports_of(source, "mle_rl.agent.probe")]
    assert found == ["mle_rl.env.tasks", "mle_rl.sampling", "mle_rl.agent.actors",
                     "mle_rl.agent.buffer", "mle_rl.agent.prompt_sources", "mle_rl.config",
                     "mle_rl.io.policy"]
    graph = _graph()
    assert "mle_rl.warmstart.pipeline" in graph["mle_rl.agent.components"]   # in a function
    assert "mle_rl.env.builtin.images" in graph["mle_rl.env.builtin"]        # a package


def test_no_import_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_imports_follow_the_layers():
    bad = []
    for module, edges in _graph().items():
        unit = _unit(module)
        if unit is None:
            continue
        assert unit in MAY_IMPORT, f"{module}: {unit!r} is in no layer; add it to LAYERS"
        for target, line in edges.items():
            other = _unit(target)
            if other is not None and other != unit and other not in MAY_IMPORT[unit]:
                bad.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target} "
                           f"({unit} may import only {sorted(MAY_IMPORT[unit]) or 'nothing'})")
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_env_knows_nothing_of_jax():
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {name}"
           for m in MODULES if _unit(m) == "env"
           for name, line in _imports(m, MODULES[m]) if name.split(".")[0] in JAX_LIBS]
    assert not bad, "\n".join(bad)


def test_only_config_reads_flags():
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {name}"
           for m in MODULES if m != "mle_rl.config"
           for name, line in _imports(m, MODULES[m]) if name.split(".")[0] == "absl"]
    assert not bad, "\n".join(bad)


def test_no_module_is_long():
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them): {long}"


def test_sources_compile_without_warnings():
    """An invalid escape such as '\\{' in a docstring is a DeprecationWarning on Python 3.11
    and a SyntaxWarning on 3.12 (seen on the accelerator image): every source compiles
    clean on both."""
    import warnings

    noisy = []
    for path in sorted(p for d in ("mle_rl", "experiments", "benchmarks", "tests")
                       for p in (ROOT / d).rglob("*.py")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                compile(path.read_text(), str(path), "exec")
            except (SyntaxError, SyntaxWarning, DeprecationWarning) as e:
                noisy.append(f"{path.relative_to(ROOT)}: {e}")
    assert not noisy, noisy
