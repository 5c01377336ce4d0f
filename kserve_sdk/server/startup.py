"""Start-up problems told in one line: ports that cannot be bound, and flags that look like a typo of ours.

A ``StartupFailure`` is logged by ``ModelServer.start`` as its one line, and the process exits with
status 1, without a traceback: the message already says what to change.
"""
import difflib
import errno
import socket
from argparse import ArgumentParser
from typing import Iterable, List, Set, Tuple

from ..logging import logger


class StartupFailure(Exception):
    """The server cannot start; the message names the flag or file to change."""


def bind_failure(flag: str, port: int, error: OSError) -> StartupFailure:
    """The failure to report when ``port`` (given by ``flag``) cannot be bound."""
    if error.errno == errno.EADDRINUSE:
        return StartupFailure(f"{flag} {port} is in use")
    return StartupFailure(f"{flag} {port} cannot be bound: {error.strerror or error}")


def check_port_free(flag: str, port: int) -> None:
    """Raise a StartupFailure if nothing could listen on ``port`` on every interface right now, as gRPC
    will (``[::]``, and ``0.0.0.0``), so a failure is told once, before worker processes are forked."""
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 on this machine
            continue
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does: TIME_WAIT is no obstacle
            try:
                probe.bind((host, port))
            except OSError as e:
                if e.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    raise bind_failure(flag, port, e) from None


def _flag_names(parser: ArgumentParser) -> List[str]:
    return [option for action in parser._actions for option in action.option_strings if option.startswith("--")]


def _normal(flag: str) -> str:
    return flag.lstrip("-").split("=", 1)[0].replace("-", "_").lower()


def near_misses(unknown: Iterable[str], flags: Iterable[str]) -> List[Tuple[str, str]]:
    """(given, meant) for each argument in ``unknown`` that looks like a misspelling of one of ``flags``.

    Unknown flags are allowed (a KServe script passes its own), so only close look-alikes are named.
    """
    flags = list(flags)
    by_normal = {_normal(flag): flag for flag in flags}
    found = []
    for given in unknown:
        if not given.startswith("-") or given.lstrip("-")[:1].isdigit() or given in ("-", "--"):
            continue
        meant = difflib.get_close_matches(_normal(given), list(by_normal), n=1, cutoff=0.8)
        if meant:
            found.append((given.split("=", 1)[0], by_normal[meant[0]]))
    return found


def _flags_of_live_parsers() -> Set[str]:
    """The flags of every argparse parser in this process: a script's own parser (``parents=[parser]``)
    reads flags the server does not know, and those are no typos."""
    import gc

    return {option for obj in gc.get_objects() if isinstance(obj, ArgumentParser)
            for action in obj._actions for option in action.option_strings}


def warn_near_misses(unknown: Iterable[str], parser: ArgumentParser) -> None:
    """Log a warning for each unknown argument that looks like one of ``parser``'s flags and that no
    other parser in the process defines."""
    found = near_misses(unknown, _flag_names(parser))
    if found:  # rare: only then walk the heap for the script's own parsers
        script_flags = _flags_of_live_parsers()
        for given, meant in found:
            if given not in script_flags:
                logger.warning("unknown flag %s ignored: did you mean %s?", given, meant)
