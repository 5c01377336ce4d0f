"""docs/architecture.md names every package of kserve_sdk (every folder with an ``__init__.py``) and every
top-level module, so that a new one cannot be added without saying where it sits and what it does."""
import os
import re
from typing import List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "kserve_sdk")
PAGE = os.path.join(ROOT, "docs", "architecture.md")


def packages() -> List[str]:
    """Every package below kserve_sdk/, as a path relative to it with a trailing slash (``protocol/grpc/``)."""
    found = []
    for folder, _, files in os.walk(PACKAGE):
        if folder != PACKAGE and "__init__.py" in files:
            found.append(os.path.relpath(folder, PACKAGE).replace(os.sep, "/") + "/")
    return sorted(found)


def top_level_modules() -> List[str]:
    return sorted(name for name in os.listdir(PACKAGE) if name.endswith(".py"))


def mentioned(name: str, page: str) -> bool:
    """Whether the page names ``name`` (``protocol/grpc/``, ``model.py``) as a path of its own, written from
    kserve_sdk/ or with that prefix: ``openai/model.py`` does not mention ``model.py``."""
    return re.search(r"(?<![\w/.])(?:kserve_sdk/)?" + re.escape(name) + r"(?![\w.])", page) is not None


def test_the_mention_rule():
    page = "`openai/model.py`, `kserve_sdk/protocol/grpc/` and `batching.py`"
    assert mentioned("batching.py", page) and mentioned("protocol/grpc/", page)
    assert not mentioned("model.py", page)
    assert not mentioned("grpc/", page)


def test_every_package_and_top_level_module_is_in_the_architecture_page():
    with open(PAGE) as f:
        page = f.read()
    names = packages() + top_level_modules()
    assert "protocol/rest/openai/types/" in names and "model_server.py" in names and "__init__.py" in names
    missing = [name for name in names if not mentioned(name, page)]
    assert missing == [], f"docs/architecture.md does not mention {missing}: add each to its layer's table"
