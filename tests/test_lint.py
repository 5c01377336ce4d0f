"""ruff (lint and import order) over the code and mypy over the typed core, as configured in pyproject.toml."""
import subprocess
import sys

import pytest

from conftest import ROOT

LINTED = ["kserve_sdk", "samples", "hack", "tests", "compat"]


def _run(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert "No module named" not in out.stderr, f"{out.stderr.strip()}: install the test extra (pip install -e .[test])"
    return out


def test_ruff_is_clean():
    out = _run("ruff", "check", "--no-cache", "--output-format", "concise", *LINTED)
    if out.returncode:
        pytest.fail(out.stdout + out.stderr, pytrace=False)


def test_mypy_is_clean_on_the_core():
    out = _run("mypy")  # the files and options: [tool.mypy] in pyproject.toml
    if out.returncode:
        pytest.fail(out.stdout + out.stderr, pytrace=False)
