"""The import graph of kserve_sdk, read from every module's own import statements (those inside functions
too; not those under ``if TYPE_CHECKING:``, which never run): no cycles, and the wire vocabulary
(kserve_sdk/protocol/) never reaches up into the handlers."""
import ast
import os
from typing import Dict, List, Set

from conftest import ROOT

PACKAGE = "kserve_sdk"


def _module_names() -> Dict[str, str]:
    """Dotted module name -> file path, for every module of the package."""
    names = {}
    for folder, _, files in os.walk(os.path.join(ROOT, PACKAGE)):
        for file in files:
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST) -> List[ast.stmt]:
    """Every import statement of a module, at any depth, except under ``if TYPE_CHECKING:``."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


def _targets(module: str, is_package: bool, node: ast.stmt, known: Set[str]) -> Set[str]:
    """The package's modules that one import statement of ``module`` imports by name."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in known}
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    targets = {source} if source in known else set()
    targets |= {f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in known}
    return targets


def import_graph() -> Dict[str, Set[str]]:
    """Module -> the package's modules it imports (itself excluded)."""
    names = _module_names()
    known = set(names)
    graph = {}
    for module, path in names.items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        is_package = path.endswith("__init__.py")
        edges = set()
        for node in _import_nodes(tree):
            edges |= _targets(module, is_package, node, known)
        graph[module] = edges - {module}
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    groups: List[List[str]] = []

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
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_graph_sees_imports_inside_functions_and_skips_type_checking_ones():
    graph = import_graph()
    assert "kserve_sdk.clients.forward" in graph["kserve_sdk.model"]  # imported inside a method
    assert "kserve_sdk.protocol.grpc.convert" in graph["kserve_sdk.protocol.infer_type"]  # inside a method
    assert "kserve_sdk.protocol.infer_type" not in graph["kserve_sdk.protocol.rest_codec"]  # TYPE_CHECKING only
    # the checker itself finds a cycle when there is one
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_the_package():
    """No cycle anywhere, except through the top package's ``__init__`` (KServe's ``import kserve``
    re-exports, which no module below imports)."""
    graph = import_graph()
    without_top = {module: edges - {PACKAGE} for module, edges in graph.items() if module != PACKAGE}
    assert cycles(without_top) == []


def test_protocol_and_clients_modules_import_no_cycle_and_protocol_no_handler():
    graph = import_graph()
    layered = [m for m in graph if m.startswith(("kserve_sdk.protocol", "kserve_sdk.clients"))]
    assert "kserve_sdk.clients.pool" in layered and "kserve_sdk.protocol.infer_tensors" in layered
    for group in cycles(graph):
        assert not set(group) & set(layered), group
    upward = {m: sorted(t for t in graph[m] if t.startswith("kserve_sdk.handlers"))
              for m in layered if m.startswith("kserve_sdk.protocol")}
    assert {m: t for m, t in upward.items() if t} == {}
