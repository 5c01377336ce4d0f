"""The tests' own rules: no test file imports another (what they share is in tests/helpers.py), and
``eventually`` waits as it says, within its deadline."""
import ast
import glob
import os
import time

import pytest

from helpers import ROOT, eventually

TESTS = os.path.join(ROOT, "tests")


def imported_modules(path: str) -> set:
    """Every module name the file imports, at any depth (imports inside functions included)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_test_file_imports_another():
    offenders = {}
    for path in sorted(glob.glob(os.path.join(TESTS, "**", "test_*.py"), recursive=True)):
        tests = {name for name in imported_modules(path) if name.split(".")[-1].startswith("test_")}
        if tests:
            offenders[os.path.relpath(path, ROOT)] = sorted(tests)
    assert offenders == {}, f"move what they share into tests/helpers.py: {offenders}"


def test_the_import_rule_sees_imports_at_any_depth(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text("import os\nfrom test_a import b\ndef f():\n    import test_c, fast.test_d\n"
                    "    from helpers import eventually\n")
    assert imported_modules(str(path)) == {"os", "test_a", "test_c", "fast.test_d", "helpers"}


def test_eventually_returns_the_first_true_value():
    answers = iter([0, None, "", "yes", "later"])
    assert eventually(lambda: next(answers), timeout=5, interval=0) == "yes"


def test_eventually_asks_again_after_a_failed_assertion():
    calls = []

    def check():
        calls.append(1)
        assert len(calls) == 3, f"call {len(calls)}"
        return True

    assert eventually(check, timeout=5, interval=0) is True and len(calls) == 3


def test_eventually_fails_with_the_last_failure_once_the_time_is_up():
    calls = []

    def check():
        calls.append(time.monotonic())
        raise AssertionError(f"attempt {len(calls)}")

    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"^the thing: not so after 0\.2 s: attempt (\d+)") as info:
        eventually(check, timeout=0.2, interval=0.01, message="the thing")
    assert info.value.args[0].splitlines()[0].endswith(f"attempt {len(calls)}")  # the last one
    assert 0.2 <= calls[-1] - start and time.monotonic() - start < 2
    assert len(calls) > 3  # asked again and again, not once


def test_eventually_names_a_check_that_stayed_false():
    def quiet():
        return []

    with pytest.raises(AssertionError, match=r"not so after 0\.05 s: quiet\(\) returned \[\]"):
        eventually(quiet, timeout=0.05, interval=0.01)


def test_eventually_lets_other_errors_through_at_once():
    def broken():
        raise KeyError("x")

    start = time.monotonic()
    with pytest.raises(KeyError):
        eventually(broken, timeout=5)
    assert time.monotonic() - start < 1
