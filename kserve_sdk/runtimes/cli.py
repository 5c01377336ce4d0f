"""The command line every runtime shares: KServe's flags, load the model file, serve it.

A setup mistake (no model file, several, a missing extra) or a file the library cannot load stops the
process before it serves, with one line saying what is wrong: the server never reports ready, and in
Kubernetes the pod's log shows that line.
"""
import argparse
import sys
from typing import Callable, Optional

import kserve_sdk as kserve
from kserve_sdk import model_server
from kserve_sdk.logging import configure_logging, logger

from .extras import MissingExtra
from .model_file import ModelFileError

DEFAULT_NTHREAD = 1


def parse_args(description: str, nthread: bool = False,
               add_flags: Optional[Callable[[argparse.ArgumentParser], None]] = None) -> argparse.Namespace:
    """Every ModelServer flag, plus ``--nthread`` for the runtimes that take it and what ``add_flags`` adds."""
    started_as = getattr(sys.modules.get("__main__"), "__spec__", None)  # the module `python -m` ran
    module = started_as.name.removesuffix(".__main__") if started_as else None  # a package's __main__: the package
    parser = argparse.ArgumentParser(parents=[model_server.parser], description=description.split("\n\n")[0],
                                     prog=f"python -m {module}" if module else None)
    if nthread:
        parser.add_argument("--nthread", "-nthread", default=DEFAULT_NTHREAD, type=int,
                            help="Threads the model's library uses for one prediction.")
    if add_flags:
        add_flags(parser)
    args, _ = parser.parse_known_args()
    return args


def first_line(error: BaseException) -> str:
    """An error's first non-empty line (native libraries append their stack traces to the message)."""
    return next((line.strip() for line in str(error).splitlines() if line.strip()), "")


def main(build: Callable[[argparse.Namespace], kserve.Model], description: str, nthread: bool = False,
         add_flags: Optional[Callable[[argparse.ArgumentParser], None]] = None) -> None:
    """Parse the flags, build the model with ``build(args)``, load it and serve it until SIGTERM."""
    args = parse_args(description, nthread, add_flags)
    if args.configure_logging:
        configure_logging(args.log_config_file)
    model = build(args)
    try:
        model.load()
    except (ModelFileError, MissingExtra) as e:
        logger.error("%s", e)
        sys.exit(1)
    except Exception as e:  # a corrupt file, or one saved by an incompatible library version
        logger.error("model %s failed to load from %s: %s: %s", model.name,
                     getattr(model, "model_file", None) or args.model_dir, type(e).__name__, first_line(e))
        sys.exit(1)
    kserve.ModelServer().start([model])
