"""Which versions of a model are served: Triton's version policy, and the order of version names.

Versions are ordered by number when they are numbers (``2`` < ``10``) and in natural order otherwise: the
digits inside a name compare as numbers (``v2`` < ``v10`` < ``v10b``). The highest version is the last in
that order; it answers a request that names no version.
"""
import dataclasses
import re
from typing import Any, Iterable, List, Mapping, Optional, Tuple

_DIGITS = re.compile(r"(\d+)")
_NUMBER = re.compile(r"[0-9]+")

#: The shapes ``version_policy`` takes, as the error for any other says them.
POLICY_SHAPES = ('{"latest": {"num_versions": N}}', '{"all": {}}', '{"specific": {"versions": [1, 3]}}')


def is_number(name: str) -> bool:
    """Whether a folder name is a version number (Triton's numbered version folders: ``1``, ``2``, ...)."""
    return _NUMBER.fullmatch(name) is not None


def version_key(version: str) -> Tuple[Any, ...]:
    """The sort key of a version name: digit runs compare as numbers, the rest as text (natural order)."""
    parts = _DIGITS.split(version)  # text, number, text, number, ...: the same type at each position
    return tuple(int(part) if index % 2 else part for index, part in enumerate(parts)), version


def ordered(versions: Iterable[str]) -> List[str]:
    """Version names from the lowest to the highest."""
    return sorted(versions, key=version_key)


def highest(versions: Iterable[str]) -> Optional[str]:
    """The highest version name (None when there is none): the one a request without a version reaches."""
    return max(versions, key=version_key, default=None)


@dataclasses.dataclass(frozen=True)
class VersionPolicy:
    """Triton's version policy: ``latest`` (the ``num_versions`` highest), ``all``, or ``specific``
    (the ``versions`` listed)."""

    kind: str = "latest"
    num_versions: int = 1
    versions: Tuple[str, ...] = ()

    def select(self, available: Iterable[str]) -> Tuple[List[str], List[str]]:
        """The versions to serve out of those ``available`` (lowest first), and the versions the policy lists
        that are not available (``specific`` only)."""
        distinct = set(available)
        if len(distinct) == 1 and self.kind != "specific":  # most models: one version, nothing to order
            return list(distinct), []
        present = ordered(distinct)
        if self.kind == "all":
            return present, []
        if self.kind == "latest":
            return present[-self.num_versions:], []
        return ordered(v for v in self.versions if v in present), [v for v in self.versions if v not in present]

    def describe(self) -> str:
        """The policy as its JSON says it."""
        if self.kind == "latest":
            return f'{{"latest": {{"num_versions": {self.num_versions}}}}}'
        if self.kind == "all":
            return '{"all": {}}'
        return f'{{"specific": {{"versions": [{", ".join(self.versions)}]}}}}'


#: Triton's default, and ours for a model in numbered version folders: the highest version only.
LATEST_ONE = VersionPolicy()
#: MLServer serves every version it finds: the default for a model whose versions come from settings files.
ALL = VersionPolicy("all")


def parse_policy(value: Any) -> VersionPolicy:
    """A ``version_policy`` value in Triton's JSON shape; a ValueError says what is wrong."""
    if not isinstance(value, Mapping) or len(value) != 1:
        raise ValueError(f"version_policy must be one of {', '.join(POLICY_SHAPES)}; got {value!r}")
    ((kind, body),) = value.items()
    if not isinstance(body, Mapping):
        raise ValueError(f"version_policy {kind!r} must hold an object; got {body!r}")
    if kind == "latest":
        num = body.get("num_versions", 1)
        if type(num) is not int or num < 1 or set(body) - {"num_versions"}:
            raise ValueError(f'version_policy latest must be {{"num_versions": N}} with N >= 1; got {dict(body)!r}')
        return VersionPolicy("latest", num)
    if kind == "all":
        if body:
            raise ValueError(f'version_policy all takes no fields ({{"all": {{}}}}); got {dict(body)!r}')
        return ALL
    if kind == "specific":
        return VersionPolicy("specific", versions=_listed(body))
    raise ValueError(f"version_policy must be one of {', '.join(POLICY_SHAPES)}; got {kind!r}")


def _listed(body: Mapping[str, Any]) -> Tuple[str, ...]:
    versions = body.get("versions")
    if set(body) - {"versions"} or not isinstance(versions, list) or not versions:
        raise ValueError(f'version_policy specific must be {{"versions": [...]}}, a non-empty list; got {dict(body)!r}')
    listed = []
    for version in versions:
        if (type(version) is int and version >= 0) or (isinstance(version, str) and version):
            listed.append(str(version))
        else:
            raise ValueError(f"version_policy specific: a version is a number or a non-empty string; got {version!r}")
    return tuple(dict.fromkeys(listed))
