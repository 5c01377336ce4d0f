"""A Prometheus scrape of the multi-process metric files, each entry parsed once and each sample's text kept.

Reaches into prometheus-client: reads the files of its multi-process mode in their private layout (``mmap_dict``,
which :mod:`.prometheus_values` writes and server/workers.py folds into), merges them as its
``MultiProcessCollector`` does (counters and summaries summed over processes; histogram buckets summed, made
cumulative and counted; gauges by their multi-process mode, ``all`` ones labelled by ``pid``) and writes what its
encoders write for them (text 0.0.4 and OpenMetrics 1.0, with its name escaping).

Why: prometheus-client parses every entry's JSON key and formats every sample's labels again on each scrape, on
the event loop, which costs a server of many models a pause at every scrape. Here a file is parsed once: until it
is compacted (another file, renamed over it, with another generation in its header) it only grows, so a scrape
parses only the entries added since the last one. Each sample's line up to its value is kept, and the text of
its value while it stays the same, so a scrape reads the numbers and writes those that changed. The figures are
in docs/performance.md.

Plain path (``KSERVE_SDK_INTERNALS=off``): metrics.render uses prometheus-client's ``MultiProcessCollector`` and
encoders.
"""
import json
import os
import threading
from typing import Dict, List, Optional, Set, Tuple

from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.utils import floatToGoString

from .prometheus_values import entry_size, key_at, read_header

#: Gauge modes whose processes' values are combined into one sample, and how.
_COMBINED = {"sum": "sum", "livesum": "sum", "max": "max", "livemax": "max", "min": "min", "livemin": "min",
             "mostrecent": "recent", "livemostrecent": "recent"}
#: How many entries the table may keep beyond twice those in the files before it is built again.
_SLACK = 1024


class _Family:
    """One metric: its name, type, help and gauge mode, and its samples in the order they are written."""

    __slots__ = ("name", "typ", "help", "sids", "groups")

    def __init__(self, name: str, typ: str, help_text: str):
        self.name, self.typ, self.help = name, typ, help_text
        self.sids: List[int] = []  # counters, gauges and summaries
        self.groups: Dict[tuple, _Histogram] = {}  # histograms: labels without le -> the group's samples


class _Histogram:
    """One histogram's samples for one label set: buckets by bound, the count (made here) and the sum."""

    __slots__ = ("buckets", "count", "sum")

    def __init__(self, count: int):
        self.buckets: List[Tuple[float, int]] = []  # (bound, sample id), ascending
        self.count, self.sum = count, -1


class _File:
    """What is known of one file: its identity (inode, and the generation prometheus_values writes in the
    header's padding, as an inode can be reused), how far it is parsed, and its entries' value offsets (in
    doubles) and sample ids."""

    __slots__ = ("identity", "parsed", "offsets", "sids", "families")

    def __init__(self, identity: Tuple[int, bytes]):
        self.identity, self.parsed = identity, 8
        self.offsets: List[int] = []
        self.sids: List[int] = []
        self.families: Set[str] = set()  # a family is written when a file has an entry of it, even without samples


class Scraper:
    """Reads a metrics directory into the text formats; one per directory, safe to share between threads."""

    def __init__(self, directory: str):
        self._directory = directory
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._files: Dict[str, _File] = {}
        self._ids: Dict[tuple, int] = {}  # (file kind, pid of an 'all' gauge or None, key) -> sample id
        self._families: Dict[str, _Family] = {}
        self._names: List[str] = []  # per sample id: its sample name
        self._labels: List[tuple] = []  # per sample id: its (label, value) pairs, sorted
        self._family_of: List[_Family] = []
        self._prefixes: Dict[str, List[Optional[str]]] = {}  # escaping -> per sample id: its line up to the value
        self._values: List[float] = []  # per sample id: the value last written, and its text
        self._texts: List[str] = []

    def render(self, openmetrics_format: bool, escaping: str) -> str:
        """The scrape's text, without OpenMetrics' closing ``# EOF``.

        Raises FileNotFoundError when a file that is not a live gauge's goes while it is read, as
        prometheus-client does (a dead worker's file folded into the totals): try again.
        """
        with self._lock:
            values, present, families = self._read()
            text = self._write(values, present, families, openmetrics_format, escaping)
            if len(self._names) > 2 * sum(present) + _SLACK:  # mostly series that left: forget them
                self._reset()
            return text

    def _read(self) -> Tuple[List[float], bytearray, Set[str]]:
        """Each sample's value merged over the files, whether any file has it, and the families with entries."""
        names = sorted(name for name in os.listdir(self._directory) if name.endswith(".db"))
        for gone in set(self._files) - set(names):
            del self._files[gone]
        merged: Dict[int, float] = {}
        latest: Dict[int, float] = {}
        families: Set[str] = set()
        for name in names:
            parts = name.split("_")
            try:
                families |= self._read_file(name, parts, merged, latest)
            except FileNotFoundError:
                if not (parts[0] == "gauge" and parts[1].startswith("live")):
                    raise
        count = len(self._names)
        values, present = [0.0] * count, bytearray(count)
        for sid, value in merged.items():
            values[sid], present[sid] = value, 1
        return values, present, families

    def _read_file(self, name: str, parts: List[str], merged: Dict[int, float],
                   latest: Dict[int, float]) -> Set[str]:
        """Merge one file's values in; the families it has entries of."""
        with open(os.path.join(self._directory, name), "rb") as stream:
            inode = os.fstat(stream.fileno()).st_ino
            data = stream.read()
        used, generation = read_header(data)
        identity = (inode, generation)
        known = self._files.get(name)
        if known is None or known.identity != identity or known.parsed > used:
            known = self._files[name] = _File(identity)
        if known.parsed < used:
            self._parse(known, data, used, parts)
        doubles = memoryview(data)[:len(data) & ~7].cast("d")
        how = _COMBINED.get(parts[1], "all") if parts[0] == "gauge" else "sum"
        if how == "sum":
            for offset, sid in zip(known.offsets, known.sids, strict=True):
                merged[sid] = merged.get(sid, 0.0) + doubles[offset]
        else:
            for offset, sid in zip(known.offsets, known.sids, strict=True):
                _combine(how, merged, latest, sid, doubles[offset], doubles[offset + 1])
        return known.families

    def _parse(self, known: _File, data: bytes, used: int, parts: List[str]) -> None:
        """The entries of a file from where its last parse stopped to ``used``."""
        typ = parts[0]
        kind = f"gauge_{parts[1]}" if typ == "gauge" else typ
        pid = parts[2][:-3] if typ == "gauge" and parts[1] not in _COMBINED else None
        position = known.parsed
        while position < used:
            key = key_at(data, position)
            position += entry_size(len(key))
            sid = self._ids.get((kind, pid, key))
            if sid is None:
                sid = self._ids[kind, pid, key] = self._add(typ, pid, key)
            known.offsets.append((position - 16) >> 3)  # the entry's value, before its timestamp
            known.sids.append(sid)
            known.families.add(self._family_of[sid].name)
        known.parsed = used

    def _add(self, typ: str, pid: Optional[str], key: bytes) -> int:
        """A new sample from an entry's key, in its family (made when it is the first)."""
        metric_name, name, labels, help_text = json.loads(key)
        family = self._families.get(metric_name)
        if family is None:
            family = self._families[metric_name] = _Family(metric_name, typ, help_text)
        pairs = tuple(sorted(labels.items()))
        if pid is not None:
            pairs = tuple(sorted(pairs + (("pid", pid),)))
        if typ != "histogram":
            sid = self._new_sample(family, name, pairs)
            family.sids.append(sid)
            return sid
        without_le = tuple(pair for pair in pairs if pair[0] != "le")
        group = family.groups.get(without_le)
        if group is None:
            group = family.groups[without_le] = _Histogram(self._new_sample(family, metric_name + "_count",
                                                                            without_le))
        if len(without_le) == len(pairs):
            group.sum = self._new_sample(family, name, pairs)
            return group.sum
        bound = float(labels["le"])
        sid = self._new_sample(family, name, tuple(sorted(without_le + (("le", floatToGoString(bound)),))))
        group.buckets.append((bound, sid))
        group.buckets.sort()
        return sid

    def _new_sample(self, family: _Family, name: str, pairs: tuple) -> int:
        self._names.append(name)
        self._labels.append(pairs)
        self._family_of.append(family)
        self._values.append(float("nan"))
        self._texts.append("")
        return len(self._names) - 1

    def _write(self, values: List[float], present: bytearray, families: Set[str], openmetrics_format: bool,
               escaping: str) -> str:
        prefixes = self._prefixes.setdefault(escaping, [])
        prefixes.extend([None] * (len(self._names) - len(prefixes)))
        out: List[str] = []
        for name in sorted(families):
            family = self._families[name]
            lines = self._histogram_lines(family, values, present) if family.groups else [
                sid for sid in family.sids if present[sid]]
            out.append(_header(family, openmetrics_format, escaping))
            for sid in lines:
                prefix = prefixes[sid]
                if prefix is None:
                    prefix = prefixes[sid] = _prefix(self._names[sid], self._labels[sid], escaping)
                value = values[sid]
                if value != self._values[sid]:
                    self._values[sid], self._texts[sid] = value, floatToGoString(value) + "\n"
                out.append(prefix)
                out.append(self._texts[sid])
        return "".join(out)

    @staticmethod
    def _histogram_lines(family: _Family, values: List[float], present: bytearray) -> List[int]:
        """The sample ids of a histogram's lines (buckets ascending, count, sum per label set), after making the
        buckets' values cumulative and setting the counts."""
        lines: List[int] = []
        for group in family.groups.values():
            total, any_bucket = 0.0, False
            for _, sid in group.buckets:
                if present[sid]:
                    total += values[sid]
                    values[sid], any_bucket = total, True
                    lines.append(sid)
            if any_bucket:
                values[group.count], present[group.count] = total, 1
                lines.append(group.count)
            if group.sum >= 0 and present[group.sum]:
                lines.append(group.sum)
        return lines


def _combine(how: str, merged: Dict[int, float], latest: Dict[int, float], sid: int, value: float,
             timestamp: float) -> None:
    """A gauge's value from one more process, by its mode: the largest, the smallest, the latest or its own."""
    old = merged.get(sid)
    if how == "max":
        merged[sid] = value if old is None or value > old else old
    elif how == "min":
        merged[sid] = value if old is None or value < old else old
    elif how == "recent":  # a value never set (no time) is not written, as in prometheus-client
        if latest.get(sid, 0.0) < timestamp:
            merged[sid], latest[sid] = value, timestamp
    else:
        merged[sid] = value


def _header(family: _Family, openmetrics_format: bool, escaping: str) -> str:
    """A family's ``# HELP`` and ``# TYPE`` lines as each format writes them."""
    name, typ = family.name, family.typ
    if openmetrics_format:
        help_text = family.help.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    else:
        help_text = family.help.replace("\\", r"\\").replace("\n", r"\n")
        name += "_total" if typ == "counter" else ""
    name = openmetrics.escape_metric_name(name, escaping)
    return f"# HELP {name} {help_text}\n# TYPE {name} {typ}\n"


def _prefix(name: str, pairs: tuple, escaping: str) -> str:
    """A sample's line up to its value: ``name{label="value",...} ``, or ``{"name",...} `` for a name only UTF-8
    allows."""
    labels = ",".join('{}="{}"'.format(openmetrics.escape_label_name(label, escaping),
                                       value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\""))
                      for label, value in pairs)
    escaped = openmetrics.escape_metric_name(name, escaping)
    if escaped.startswith('"'):
        return "{" + escaped + ("," + labels if labels else "") + "} "
    return escaped + ("{" + labels + "}" if labels else "") + " "
