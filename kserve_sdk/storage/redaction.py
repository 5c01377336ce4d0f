"""Secrets kept out of what the server logs and answers: a URI's password and secret-looking query values."""
import re
from typing import List, Optional
from urllib.parse import quote, unquote, unquote_plus, urlsplit, urlunsplit

# Query parameters whose values are secrets (Azure SAS signatures, presigned S3/GCS URLs, tokens).
_SECRET_PARAM = re.compile(r"sig|signature|token|secret|password|passwd|key|credential|auth", re.IGNORECASE)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def redact(uri: Optional[str]) -> str:
    """``uri`` without the password of its user info nor the values of secret-looking query parameters."""
    if not uri:
        return ""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<unparsable URI>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else f"***@{host}"
    query = "&".join(f"{k}=***" if sep and _SECRET_PARAM.search(unquote_plus(k)) else k + sep + v
                     for k, sep, v in (part.partition("=") for part in parts.query.split("&"))) if parts.query else ""
    if netloc == parts.netloc and query == parts.query:
        return uri  # nothing hidden: as written (rebuilding it would drop an empty host, hf:///x)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _secrets(uri: str) -> List[str]:
    try:
        parts = urlsplit(uri)
        found = [parts.password] if parts.password else []
    except ValueError:
        return []
    for k, sep, v in (part.partition("=") for part in parts.query.split("&")):
        if sep and v and _SECRET_PARAM.search(unquote_plus(k)):
            found += [v, unquote_plus(v), unquote(v)]
    found = [s for s in found if len(s) >= 3]
    return sorted(set(found + [quote(s, safe="") for s in found]), key=len, reverse=True)


def scrub(text: str, uri: Optional[str]) -> str:
    """``text`` with the secrets of ``uri`` (password, secret-looking query values) masked, in case an SDK
    quoted the URL in its error."""
    if not uri:
        return text
    text = text.replace(uri, redact(uri))
    for secret in _secrets(uri):
        text = text.replace(secret, "***")
    return text
