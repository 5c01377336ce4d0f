"""``USE_CLIENT_DEFAULT``: the ``timeout`` a client call takes when none is given (KServe's name).

Leaving ``timeout`` out of a call uses the client's own timeout; ``timeout=None`` means no timeout at all.
httpx's ``httpx.USE_CLIENT_DEFAULT`` (what KServe's REST client defaults to) is taken the same way.
"""


class _UseClientDefault:
    """The type of :data:`USE_CLIENT_DEFAULT`: "not given", told apart from ``None`` ("no timeout")."""

    def __repr__(self) -> str:
        return "USE_CLIENT_DEFAULT"


USE_CLIENT_DEFAULT = _UseClientDefault()


def is_client_default(value: object) -> bool:
    """Whether ``value`` says "the client's default": ours, or httpx's ``USE_CLIENT_DEFAULT``."""
    return isinstance(value, _UseClientDefault) or type(value).__name__ == "UseClientDefault"
