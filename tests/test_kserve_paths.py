"""Every KServe import path docs/kserve-compat.md promises still imports from kserve_sdk, with the names it lists.

In-process and without the ``kserve`` alias: ``kserve.<x>`` is ``kserve_sdk.<x>``, so importing the latter checks
the path itself (tests/test_kserve_compat.py checks the alias in a process of its own).
"""
import importlib
import importlib.util
import os
import re
from typing import List, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "kserve-compat.md")

#: Modules that need an optional package, and that package: skipped when it is not installed.
NEEDS = {"kserve_sdk.ray": "ray"}


def _names(cell: str) -> List[str]:
    """The backticked names a table cell lists, leaving out those in parentheses (explanations, not exports)."""
    while re.search(r"\([^()]*\)", cell):
        cell = re.sub(r"\([^()]*\)", "", cell)
    return re.findall(r"`([A-Za-z_][\w.]*)`", cell)


def provided_modules() -> List[Tuple[str, List[str]]]:
    """(kserve module, names) of each row of the page's first table, the ``kserve`` modules kserve_sdk provides."""
    with open(PAGE) as f:
        lines = f.read().splitlines()
    start = lines.index("| `kserve` module | what it is here |")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = line.split("|")
        (module,) = re.findall(r"`(kserve[\w.]*)`", cells[1])
        rows.append((module, _names(cells[2])))
    return rows


ROWS = provided_modules()


def test_the_table_is_read():
    modules = dict(ROWS)
    assert len(ROWS) > 20
    assert modules["kserve.model_server"] == ["ModelServer", "parser", "args"]  # "(the shared flags, ...)" left out
    assert "OpenAIProxyModel" in modules["kserve.protocol.rest.openai"]
    assert _names("`a`, `b.c` (not `d`), `e`") == ["a", "b.c", "e"]


@pytest.mark.parametrize("module,names", ROWS, ids=[module for module, _ in ROWS])
def test_each_kserve_path_imports_with_its_names(module: str, names: List[str]):
    counterpart = module.replace("kserve", "kserve_sdk", 1)
    needs = NEEDS.get(counterpart)
    if needs and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{module} needs the optional package {needs!r}, which is not installed here")
    imported = importlib.import_module(counterpart)
    for name in names:
        target = imported
        for part in name.split("."):
            assert hasattr(target, part), f"docs/kserve-compat.md lists {name} in {module}, {counterpart} lacks it"
            target = getattr(target, part)
