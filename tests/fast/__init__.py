"""The fast tier: in-process tests of pure pieces; no server process, no subprocess (see conftest.py).

A package, so its modules (``fast.conftest``, ``fast.test_*``) never take the names of tests/'s own."""
