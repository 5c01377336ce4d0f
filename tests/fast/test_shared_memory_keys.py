"""Which shared-memory keys name one object in /dev/shm, as shm_open takes a name, and the reason given for the
others (the message a client gets with its 400 / INVALID_ARGUMENT)."""
import pytest

from kserve_sdk.errors import InvalidInput
from kserve_sdk.triton.shared_memory import check_key, key_problem


@pytest.mark.parametrize("key, name", [
    ("/my_region", "my_region"),
    ("my_region", "my_region"),
    ("/triton.shm-0", "triton.shm-0"),
    ("/..hidden", "..hidden"),
    ("/a..b", "a..b"),
    ("/" + "x" * 255, "x" * 255),
    ("/é", "é"),
])
def test_a_single_name_with_or_without_a_leading_slash_is_a_key(key, name):
    assert key_problem(key) is None
    assert check_key(key) == name


@pytest.mark.parametrize("key, problem", [
    ("", "it names no object"),
    ("/", "it names no object"),
    ("/a\0b", "it holds a NUL byte"),
    ("\0", "it holds a NUL byte"),
    ("a/b", "it holds a '/' other than a leading one"),
    ("/a/b", "it holds a '/' other than a leading one"),
    ("//a", "it holds a '/' other than a leading one"),
    ("/a/", "it holds a '/' other than a leading one"),
    ("../../etc/passwd", "it holds a '/' other than a leading one"),
    ("/..", "'..' is a directory"),
    ("..", "'..' is a directory"),
    ("/.", "'.' is a directory"),
    ("/" + "x" * 256, "it is 256 bytes long, more than the 255 a file name may have"),
    ("/" + "é" * 128, "it is 256 bytes long, more than the 255 a file name may have"),
    ("/\ud800", "it is not valid text for a file name"),
    (7, "it is not a string"),
    (None, "it is not a string"),
    (["/a"], "it is not a string"),
])
def test_anything_else_is_refused_with_the_reason(key, problem):
    assert key_problem(key) == problem
    with pytest.raises(InvalidInput) as refused:
        check_key(key)
    assert str(refused.value) == (f"shared memory key {key!r} must name one object in /dev/shm, like '/my_region' "
                                  f"(as shm_open takes it): {problem}")
