"""The import graph of kserve_sdk, read from every module's own import statements (those inside functions
too; not those under ``if TYPE_CHECKING:``, which never run) and from the module paths a module hands to
``importlib.import_module`` as strings: no cycles, and the package rules of docs/architecture.md (the core
never imports a feature package, the wire vocabulary imports no model or handler, only the entry layer
imports ``server/``)."""
import ast
import functools
import os
from typing import Dict, Iterable, List, Set

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
    submodules = {f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in known}
    if len(submodules) == len(node.names):
        # ``from . import settings``: only submodules are named, and a package's submodule needs the package
        # whatever form imports it, so that is no edge of this module to the package's ``__init__``
        return submodules
    return submodules | ({source} if source in known else set())


def _calls_import_module(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module")


def _string_targets(module: str, is_package: bool, tree: ast.AST, known: Set[str]) -> Set[str]:
    """The package's modules a module that calls ``importlib.import_module`` names in its strings (a table of
    lazy imports): absolute (``"kserve_sdk.x"``) or relative (``".x"``, read against the ``package`` argument of
    such a call, or the module's own package)."""
    calls = [node for node in ast.walk(tree) if _calls_import_module(node)]
    if not calls:
        return set()
    anchors = {module if is_package else module.rpartition(".")[0]}
    for call in calls:
        if len(call.args) > 1 and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str):
            anchors.add(call.args[1].value)
    targets = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        text = node.value
        name = text.lstrip(".")
        if text == name:
            targets |= {text} & known
        elif name:
            level = len(text) - len(name)
            for anchor in anchors:
                parts = anchor.split(".")
                targets |= {".".join(parts[:len(parts) - level + 1] + [name])} & known
    return targets


@functools.cache
def import_graph(with_strings: bool = False) -> Dict[str, Set[str]]:
    """Module -> the package's modules it imports (itself excluded); ``with_strings`` adds the modules it
    imports lazily through ``importlib.import_module`` strings. (Read once per test run: do not change it.)"""
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
        if with_strings:
            edges |= _string_targets(module, is_package, tree, known)
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


# --- the package rules (docs/architecture.md) ------------------------------------------------------------------
#: The feature packages: each holds one feature's models, its data-plane glue and its REST API.
FEATURES = ("kserve_sdk.openai", "kserve_sdk.timeseries", "kserve_sdk.jobs")

#: The entry layer builds everything below it, so it may import anything.
ENTRY_MODULES = {
    "kserve_sdk": "the top package: KServe's ``import kserve`` names, ``TimeSeriesModel`` among them",
    "kserve_sdk.model_server": "ModelServer: builds the data plane, the APIs and the servers",
    "kserve_sdk.__main__": "``python -m kserve_sdk script.py``: runs a KServe script under the import alias",
    "kserve_sdk.as_kserve": "``import kserve_sdk.as_kserve``: installs the import alias",
}
ENTRY_PACKAGES = ("kserve_sdk.server",)

#: KServe's import paths where a module moved: thin re-exports, allowed to reach what they re-export.
REEXPORTS = {
    "kserve_sdk.protocol.rest.openai": "KServe's ``kserve.protocol.rest.openai``: loads the OpenAI model classes "
                                       "of openai/ lazily, through importlib strings",
    "kserve_sdk.protocol.dataplane": "KServe's ``kserve.protocol.dataplane``: re-exports DataPlane",
}

#: Triton's REST routes (statistics, configuration, settings, shared memory): the one wire-API module of triton/.
TRITON_API = "kserve_sdk.triton.api"

#: What the wire vocabulary may import of the package (besides itself): the base it is built on.
PROTOCOL_BASE = ("kserve_sdk.protocol", "kserve_sdk.errors", "kserve_sdk.utils", "kserve_sdk.constants",
                 "kserve_sdk.logging")


def _within(module: str, packages: Iterable[str]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def _is_entry(module: str) -> bool:
    return module in ENTRY_MODULES or _within(module, ENTRY_PACKAGES)


def crossings(graph: Dict[str, Set[str]], importers: Iterable[str],
              forbidden: Iterable[str]) -> Dict[str, List[str]]:
    """Importer -> the forbidden modules it imports, for the importers that import any."""
    forbidden = tuple(forbidden)
    found = {module: sorted(t for t in graph[module] if _within(t, forbidden)) for module in importers}
    return {module: targets for module, targets in found.items() if targets}


def test_the_graph_reads_module_paths_handed_to_import_module():
    graph = import_graph(with_strings=True)
    shim = graph["kserve_sdk.protocol.rest.openai"]
    assert {"kserve_sdk.openai.model", "kserve_sdk.openai.chat_adapter", "kserve_sdk.openai.proxy"} <= shim
    assert "kserve_sdk.openai.model" not in import_graph()["kserve_sdk.protocol.rest.openai"]
    # the checker itself names a crossing when there is one
    toy = {"a.core": {"a.feature.x", "a.base"}, "a.feature.x": {"a.base"}, "a.base": set()}
    assert crossings(toy, ["a.core", "a.base"], ["a.feature"]) == {"a.core": ["a.feature.x"]}


def test_the_rules_name_packages_and_modules_that_exist():
    graph = import_graph()
    packages = set(graph)
    named = (*FEATURES, *ENTRY_MODULES, *ENTRY_PACKAGES, *REEXPORTS, *PROTOCOL_BASE, "kserve_sdk.triton", TRITON_API)
    for name in named:
        assert name in packages, f"{name} is named by a rule of test_layering.py but is not a module"


def test_the_core_never_imports_a_feature_package():
    """Only the entry layer and the listed re-exports import openai/ or timeseries/: the core (the data
    plane, the handlers, the models, ...) knows no feature by name."""
    graph = import_graph(with_strings=True)
    core = [m for m in graph if not _within(m, FEATURES) and not _is_entry(m) and m not in REEXPORTS]
    assert crossings(graph, core, FEATURES) == {}


def test_a_feature_package_never_imports_another():
    graph = import_graph(with_strings=True)
    for feature in FEATURES:
        modules = [m for m in graph if _within(m, [feature])]
        assert modules, feature
        assert crossings(graph, modules, [f for f in FEATURES if f != feature]) == {}


def test_protocol_imports_only_the_wire_vocabulary_and_the_base():
    """protocol/ is types only: no model, handler, data plane or feature module, so the clients and the server
    share it; the listed KServe import paths are the exceptions."""
    graph = import_graph(with_strings=True)
    protocol = [m for m in graph if _within(m, ["kserve_sdk.protocol"]) and m not in REEXPORTS]
    allowed = {m for m in graph if _within(m, PROTOCOL_BASE)}
    upward = {m: sorted(graph[m] - allowed) for m in protocol}
    assert {m: t for m, t in upward.items() if t} == {}


def test_triton_imports_no_handler_and_no_feature_package():
    """triton/ holds Triton's protocol extensions for the v2 data plane: the core may import it, so it reaches
    neither up into the handlers nor into a feature. Its REST API module (TRITON_API) is a wire API like
    handlers/v2.py: it builds on the handlers, and only the entry layer imports it."""
    graph = import_graph(with_strings=True)
    triton = [m for m in graph if _within(m, ["kserve_sdk.triton"]) and m != TRITON_API]
    assert len(triton) > 1
    assert crossings(graph, triton, ("kserve_sdk.handlers", *FEATURES)) == {}
    others = [m for m in graph if not _is_entry(m) and m != TRITON_API]
    assert crossings(graph, others, [TRITON_API]) == {}


def test_the_repository_imports_no_handler_data_plane_server_or_feature():
    """repository/ reads and plans a model repository in the scheduling layer: it builds models (runtimes,
    a folder's model.py) but reaches up into no handler, data plane, server or feature package."""
    graph = import_graph(with_strings=True)
    modules = [m for m in graph if _within(m, ["kserve_sdk.repository"])]
    assert len(modules) > 1
    forbidden = ("kserve_sdk.handlers", "kserve_sdk.dataplane", "kserve_sdk.model_server",
                 "kserve_sdk.model_repository", "kserve_sdk.triton", "kserve_sdk.security",
                 "kserve_sdk.server", *FEATURES)
    assert crossings(graph, modules, forbidden) == {}


def test_only_the_entry_layer_imports_server():
    graph = import_graph(with_strings=True)
    others = [m for m in graph if not _is_entry(m)]
    assert crossings(graph, others, ENTRY_PACKAGES) == {}


def test_each_listed_reexport_is_still_needed():
    """A re-export module on the list reaches outside protocol/'s base: once it does not, it leaves the list."""
    graph = import_graph(with_strings=True)
    for module in REEXPORTS:
        assert graph[module] - {m for m in graph if _within(m, PROTOCOL_BASE)}, (
            f"{module} imports only the wire vocabulary and the base now: take it off REEXPORTS")
