"""curl-equivalent raw HTTP for tests, kept for test files not yet moved to tests/helpers.py, where it lives."""
from helpers import binary_body, post_json, request  # noqa: F401
