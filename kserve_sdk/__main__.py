"""``python -m kserve_sdk path/to/model.py [args...]``: run a script written for KServe, unchanged.

The script runs as ``__main__`` with ``sys.argv`` set to ``[path/to/model.py, args...]`` and its own folder
first on ``sys.path``, as ``python path/to/model.py`` would run it, except that ``kserve`` and
``kserve.*`` imports resolve to ``kserve_sdk`` (see :mod:`kserve_sdk.server.import_alias`).
``python -m kserve_sdk -m package.module [args...]`` runs a module the same way.
``python -m kserve_sdk --model_repository DIR [flags...]`` serves a model repository with no script of yours.
"""
import os
import runpy
import sys
from typing import List

from .server.import_alias import install

USAGE = """usage: python -m kserve_sdk path/to/model.py [args...]
       python -m kserve_sdk -m package.module [args...]
       python -m kserve_sdk --model_repository DIR [flags...]

Runs a model script written for KServe on kserve_sdk, unchanged: its `kserve` and `kserve.*`
imports resolve to `kserve_sdk` and `kserve_sdk.*`. The args are the script's and the server's
flags (--http_port, --grpc_port, --workers, ...). With --model_repository and no script, the
server serves the models of that folder (docs/model-repository.md)."""


def names_repository(argv: List[str]) -> bool:
    """Whether the command line gives ``--model_repository`` (or KServe's single-dash spelling)."""
    return any(arg.split("=", 1)[0] in ("--model_repository", "-model_repository") for arg in argv)


def serve_repository() -> int:
    """Serve the model repository the flags name, and no model of a script."""
    from .model_server import ModelServer

    ModelServer().start([])
    return 0


def main(argv: List[str]) -> int:
    """Run the script (or ``-m`` module) named by ``argv`` with the kserve alias installed."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0].startswith("-") and argv[0] != "-m" and names_repository(argv):
        return serve_repository()  # the server reads its flags from sys.argv
    if argv[0] == "-m" and len(argv) < 2:
        print("python -m kserve_sdk -m: a module name is expected\n\n" + USAGE, file=sys.stderr)
        return 2
    install()
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file name in sys.argv[0]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    script = argv[0]
    if not os.path.exists(script):
        print(f"python -m kserve_sdk: can't open file {script!r}: no such file", file=sys.stderr)
        return 2
    sys.argv = list(argv)
    sys.path[0] = os.path.abspath(script if os.path.isdir(script) else os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
