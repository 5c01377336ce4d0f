"""kserve_sdk/internals/prometheus_scrape.py reads a metrics directory into the same samples, help and types as
prometheus-client's MultiProcessCollector and encoders (text 0.0.4 and OpenMetrics 1.0), in both formats' own
parsers: over several processes' files, every gauge mode, histograms and summaries, files that grow between
scrapes, files replaced by a compaction (or rewritten in place under a new generation), files that go, and label
values and help that need escaping. The files are written by prometheus-client's own writer (MmapedDict), and by
internals/prometheus_values.py's values, compacted."""
import json
import os
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, exposition, multiprocess
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as text_families

from kserve_sdk.internals import prometheus_values
from kserve_sdk.internals.prometheus_scrape import Scraper
from kserve_sdk.internals.prometheus_values import SlotValue, let_go

OPENMETRICS = ("application/openmetrics-text; version=1.0.0", openmetrics_families)
TEXT = ("text/plain; version=0.0.4", text_families)
HELP = 'requests "served", per model\\ \nand code'


def write(directory, file_name: str, entries) -> None:
    """Entries (metric, sample name, labels, value[, timestamp]) into one file, as a process writes them."""
    values = MmapedDict(os.path.join(directory, file_name))
    try:
        for metric, name, labels, value, *timestamp in entries:
            key = json.dumps([metric, name, labels, HELP], sort_keys=True)
            values.write_value(key, value, timestamp[0] if timestamp else 0.0)
    finally:
        values.close()


def histogram(model: str, observations, pid_share: float = 1.0):
    """A histogram's entries (buckets not yet cumulative, as the files keep them) for some observations."""
    bounds = ("0.1", "1.0", "+Inf")
    counts = [sum(1 for seen in observations if float(low) < seen <= float(high))
              for low, high in zip(("-inf", "0.1", "1.0"), bounds, strict=True)]
    return [("latency", "latency_bucket", {"model_name": model, "le": bound}, count * pid_share)
            for bound, count in zip(bounds, counts, strict=True)] + [
        ("latency", "latency_sum", {"model_name": model}, sum(observations) * pid_share)]


def server_files(directory, pids=(101, 102)) -> None:
    for share, pid in enumerate(pids, 1):
        write(directory, f"counter_3_{pid}.db", [
            ("requests", "requests_total", {"model_name": "a", "code": "200"}, 5.0 * share),
            ("requests", "requests_total", {"model_name": 'quo"te\\d\nb', "code": "500"}, 1.0)])
        write(directory, f"histogram_7_{pid}.db", histogram("a", [0.05, 0.5, 2.0, 0.7], share))
        write(directory, f"summary_{pid}.db", [("waited", "waited_count", {}, 3.0 * share),
                                              ("waited", "waited_sum", {}, 0.25 * share)])
        write(directory, f"gauge_livesum_{pid}.db", [("inflight", "inflight", {"model_name": "a"}, 2.0 * share)])
        write(directory, f"gauge_all_{pid}.db", [("loaded", "loaded", {}, 1.0 + share)])
        write(directory, f"gauge_max_{pid}.db", [("peak", "peak", {}, 10.0 * share)])
        write(directory, f"gauge_min_{pid}.db", [("least", "least", {}, 10.0 * share)])
        write(directory, f"gauge_mostrecent_{pid}.db", [("last", "last", {}, 7.0 * share, 1000.0 + share),
                                                        ("never", "never", {}, 4.0)])


def library(directory, accept: str) -> bytes:
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    encoder, _ = exposition.choose_encoder(accept)
    return encoder(registry)


def ours(scraper: Scraper, accept: str, escaping: str = openmetrics.UNDERSCORES) -> bytes:
    is_openmetrics = accept.startswith("application/openmetrics-text")
    return (scraper.render(is_openmetrics, escaping) + ("# EOF\n" if is_openmetrics else "")).encode()


def parsed(body: bytes, parse) -> dict:
    return {family.name: (family.type, family.documentation,
                          sorted((s.name, tuple(sorted(s.labels.items())), s.value) for s in family.samples))
            for family in parse(body.decode())}


def assert_same(directory, scraper: Scraper) -> None:
    for accept, parse in (TEXT, OPENMETRICS):
        mine, theirs = ours(scraper, accept), library(directory, accept)
        assert parsed(mine, parse) == parsed(theirs, parse), accept
        assert sorted(mine.splitlines()) == sorted(theirs.splitlines()), accept


def test_a_scrape_reads_what_prometheus_client_reads_in_both_formats(tmp_path):
    server_files(tmp_path)
    assert_same(tmp_path, Scraper(str(tmp_path)))


def test_the_merge_sums_counters_and_buckets_and_combines_each_gauge_mode(tmp_path):
    server_files(tmp_path)
    samples = parsed(ours(Scraper(str(tmp_path)), TEXT[0]), text_families)
    values = {(name, labels): value for family in samples.values() for name, labels, value in family[2]}
    assert values["requests_total", (("code", "200"), ("model_name", "a"))] == 15.0
    assert values["latency_bucket", (("le", "1.0"), ("model_name", "a"))] == 9.0  # 1 + 2, then 2 + 4: cumulative
    assert values["latency_count", (("model_name", "a"),)] == 12.0
    assert values["inflight", (("model_name", "a"),)] == 6.0
    assert values["loaded", (("pid", "101"),)] == 2.0 and values["loaded", (("pid", "102"),)] == 3.0
    assert values["peak", ()] == 20.0 and values["least", ()] == 10.0 and values["last", ()] == 14.0
    assert samples["never"][2] == []  # a most-recent gauge never set has no time: its family without samples


def test_later_scrapes_read_changed_values_new_entries_replaced_files_and_files_gone(tmp_path):
    server_files(tmp_path)
    scraper = Scraper(str(tmp_path))
    assert_same(tmp_path, scraper)
    write(tmp_path, "counter_3_101.db", [
        ("requests", "requests_total", {"model_name": "a", "code": "200"}, 50.0),
        ("requests", "requests_total", {"model_name": "b", "code": "200"}, 1.0)])
    assert_same(tmp_path, scraper)
    replaced = tmp_path / "replaced"
    replaced.mkdir()
    write(replaced, "histogram_7_102.db", histogram("c", [0.2]))
    os.replace(replaced / "histogram_7_102.db", tmp_path / "histogram_7_102.db")  # a compaction's rename
    assert_same(tmp_path, scraper)
    for gone in ("counter_3_102.db", "gauge_all_102.db"):
        os.remove(tmp_path / gone)
    assert_same(tmp_path, scraper)


def test_the_table_is_built_again_once_most_of_its_series_have_left(tmp_path):
    many = [("requests", "requests_total", {"model_name": f"m{index}"}, 1.0) for index in range(3000)]
    write(tmp_path, "counter_1_101.db", many)
    scraper = Scraper(str(tmp_path))
    assert_same(tmp_path, scraper)
    os.remove(tmp_path / "counter_1_101.db")
    write(tmp_path, "counter_1_102.db", many[:10])
    text = ours(scraper, TEXT[0])  # the scrape that finds them gone, after which the table starts again
    assert parsed(text, text_families) == parsed(library(tmp_path, TEXT[0]), text_families)
    assert len(scraper._names) == 0
    assert_same(tmp_path, scraper)
    assert len(scraper._names) == 10


@pytest.mark.parametrize("escaping", [openmetrics.ALLOWUTF8, openmetrics.UNDERSCORES, openmetrics.DOTS])
def test_names_only_utf_8_allows_are_escaped_as_the_encoders_escape_them(tmp_path, escaping):
    write(tmp_path, "counter_101.db", [("req.count", "req.count_total", {"model.name": "a"}, 2.0)])
    for accept in (TEXT[0], OPENMETRICS[0]):
        accept = accept.replace("0.0.4", "1.0.0") + f"; escaping={escaping}"
        mine = ours(Scraper(str(tmp_path)), accept, escaping)
        assert sorted(mine.splitlines()) == sorted(library(tmp_path, accept).splitlines()), accept


def test_a_missing_file_that_is_not_a_live_gauge_is_raised_for_the_scrape_to_be_tried_again(tmp_path, monkeypatch):
    server_files(tmp_path, pids=(101,))
    scraper = Scraper(str(tmp_path))
    listed = os.listdir(str(tmp_path))
    monkeypatch.setattr(os, "listdir", lambda _: listed + ["gauge_livesum_999.db"])
    assert_same(tmp_path, scraper)  # a live gauge's file that went: left out
    monkeypatch.setattr(os, "listdir", lambda _: listed + ["counter_999.db"])
    with pytest.raises(FileNotFoundError):
        scraper.render(False, openmetrics.UNDERSCORES)


def test_a_file_rewritten_in_place_under_another_generation_is_parsed_anew(tmp_path):
    """An inode can be reused by the file that replaces another: the generation in the header tells them apart."""
    write(tmp_path, "counter_1_101.db", [("requests", "requests_total", {"model_name": "a"}, 1.0)])
    scraper = Scraper(str(tmp_path))
    assert_same(tmp_path, scraper)
    other = tmp_path / "other"
    other.mkdir()
    write(other, "counter_1_101.db", [("requests", "requests_total", {"model_name": name}, 2.0)
                                      for name in ("long-model-name-b", "c", "d")])
    replacement = bytearray((other / "counter_1_101.db").read_bytes())
    replacement[4:8] = b"gen2"
    with open(tmp_path / "counter_1_101.db", "r+b") as same_inode:
        same_inode.write(replacement)
    assert_same(tmp_path, scraper)


def test_made_and_compacted_value_files_get_a_new_generation_each(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(prometheus_values, "_files", {})
    kept = SlotValue("counter", "requests", "requests_total", ["model_name"], ["kept"], HELP)
    kept.inc(3)
    scraper = Scraper(str(tmp_path))
    assert_same(tmp_path, scraper)
    (path,) = tmp_path.glob("counter_*.db")
    made = path.read_bytes()[4:8]
    for index in range(2000):  # enough series let go for the file to be compacted
        gone = SlotValue("counter", "requests", "requests_total", ["model_name"], [f"m{index}"], HELP)
        gone.inc(1)
        let_go([SimpleNamespace(_value=gone)])
    assert path.read_bytes()[4:8] != made
    kept.inc(1)
    assert_same(tmp_path, scraper)
    assert "requests_total{model_name=\"kept\"} 4.0" in ours(scraper, TEXT[0]).decode()
