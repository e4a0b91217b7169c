"""The Lambda code imports without cycles: the CRM family (`pipeline.crm`) is in none.

The graph is read from the source with `ast`, not from what one run happened to import: every
import statement counts wherever it is (module level, inside a function, under TYPE_CHECKING),
as does `importlib.import_module("<literal>")`. Importing `a.b.c` runs `a` and `a.b` first, so
`a.b.c`, and every import of it, is an edge to each of them too: a package's `__init__` importing
one of its own modules is a cycle. Nodes are the modules of the shared layer (`pipeline`), of
`functions/` and of the tools around them (`local`, `ops`, `infra`, `bench`); third-party modules
cannot import ours back, so they are left out.

A cycle hidden inside a function works until someone imports the two modules in the other
order, or moves the import to the top; this test fails at once instead.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

from tests.support.imports import loaded_after_import

ROOT = Path(__file__).resolve().parents[2]
LAYER = ROOT / "layers/shared/python"
FUNCTIONS = ROOT / "functions"
CRM_PACKAGE = "pipeline.crm"
# The packages around the Lambda code, run on a developer's machine or at synth.
TOOL_PACKAGES = ("local", "ops", "infra", "bench")

# The cycles known today, each a set of modules: none may be added, and one fixed is taken off.
KNOWN_CYCLES: list[frozenset[str]] = []


def module_files() -> dict[str, Path]:
    """Module name -> its file, for the layer's `pipeline`, every package of `functions/` and the
    tools around them (`local`, `ops`, `infra`, `bench`)."""
    found: dict[str, Path] = {}
    sources = [(LAYER, (LAYER / "pipeline").rglob("*.py")), (FUNCTIONS, FUNCTIONS.rglob("*.py"))]
    sources += [(ROOT, (ROOT / package).rglob("*.py")) for package in TOOL_PACKAGES]
    for root, paths in sources:
        for path in paths:
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported_names(tree: ast.AST, module: str, is_package: bool, known: Mapping[str, Path]) -> Iterator[str]:
    """The dotted names each import statement of `tree` (the file of `module`) imports."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, one level up per extra dot
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, node.module] if node.module else package)
            else:
                base = node.module or ""
            for alias in node.names:  # `from a import b` imports the module a.b when there is one
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
        elif (
            isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value


def import_graph(files: Mapping[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (and the packages those run first)."""
    files = files if files is not None else module_files()
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        own = module.split(".")
        edges = {".".join(own[:i]) for i in range(1, len(own))}  # its packages run before it
        for name in _imported_names(tree, module, path.name == "__init__.py", files):
            parts = name.split(".")
            edges.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        graph[module] = {target for target in edges if target in files and target != module}
    return graph


@cache
def lambda_code_graph() -> dict[str, set[str]]:
    """The import graph of the code as it is in the repository (read once per session)."""
    return import_graph()


def cycles(graph: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _shown(components: list[frozenset[str]]) -> list[list[str]]:
    return sorted(sorted(component) for component in components)


def test_no_module_of_the_crm_package_is_in_an_import_cycle() -> None:
    graph = lambda_code_graph()
    crm_modules = {m for m in graph if m == CRM_PACKAGE or m.startswith(CRM_PACKAGE + ".")}
    assert {"pipeline.crm.contract", "pipeline.crm.sync", "pipeline.crm.sweep"} <= crm_modules
    assert _shown([c for c in cycles(graph) if c & crm_modules]) == []


def test_the_lambda_codes_only_import_cycles_are_the_known_ones() -> None:
    """A new cycle anywhere in `pipeline` or `functions/` fails; so does a known one fixed (take
    it off KNOWN_CYCLES)."""
    assert _shown(cycles(lambda_code_graph())) == _shown(KNOWN_CYCLES)


def test_the_crm_package_imports_nothing_itself() -> None:
    """`pipeline/crm/__init__.py` names its modules and imports none of them (nor anything else)."""
    init = module_files()[CRM_PACKAGE]
    tree = ast.parse(init.read_text())
    assert [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)] == []
    assert ast.get_docstring(tree)


def test_importing_the_status_map_loads_no_other_module_of_ours() -> None:
    """`infra` reads the status map at synth: it pays for that module alone, not for the
    CRM family's pydantic models, Powertools or boto3."""
    ours = [m for m in module_files() if m.startswith("pipeline")]
    loaded = loaded_after_import(["pipeline.crm.status_map"], ours)
    assert loaded == ["pipeline", "pipeline.crm", "pipeline.crm.status_map"]


def test_a_back_import_inside_a_function_is_a_cycle(tmp_path: Path) -> None:
    """The graph sees what a run may never execute: `contract` importing `sync` inside a
    function closes sync -> sources -> order_events -> contract -> sync."""
    files = module_files()
    contract = tmp_path / "contract.py"
    contract.write_text(
        files["pipeline.crm.contract"].read_text()
        + "\n\ndef _late() -> None:\n    from pipeline.crm import sync  # noqa: F401\n"
    )
    cyclic = import_graph({**files, "pipeline.crm.contract": contract})
    [component] = [c for c in cycles(cyclic) if "pipeline.crm.contract" in c]
    assert {"pipeline.crm.contract", "pipeline.crm.order_events", "pipeline.crm.sync"} <= component


def test_an_init_importing_its_own_module_is_a_cycle(tmp_path: Path) -> None:
    files = module_files()
    init = tmp_path / "__init__.py"
    init.write_text('"""x"""\nfrom pipeline.crm.forms import parse_form  # noqa: F401\n')
    cyclic = import_graph({**files, CRM_PACKAGE: init})
    assert frozenset({CRM_PACKAGE, "pipeline.crm.forms"}) in cycles(cyclic)
