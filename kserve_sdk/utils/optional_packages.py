"""Optional packages a few of KServe's calls need, imported when such a call is made.

pandas is one: KServe installs it with every server; here it is the ``pandas`` extra, so a plain install
stays small and only the two calls that build a DataFrame ask for it.
"""
from types import ModuleType

PANDAS_EXTRA = "kserve-sdk[pandas]"


def require_pandas(what: str) -> ModuleType:
    """The ``pandas`` module, for ``what`` (the call that needs it, named in the error when it is missing).

    Raises ModuleNotFoundError (``name="pandas"``) saying which extra to install.
    """
    try:
        import pandas
    except ImportError as e:
        raise ModuleNotFoundError(f"{what} needs pandas, which is not installed: pip install '{PANDAS_EXTRA}'",
                                  name="pandas") from e
    return pandas
