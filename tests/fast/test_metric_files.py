"""The metric files of kserve_sdk/internals/prometheus_values.py when series are let go (a model repository's
evicted models): a series let go reads 0 at once and leaves the file at its next compaction; a series made again
counts from 0; values and their writers keep counting into the compacted file; the file and its index stay the
size of the series in use however many are let go; and a scrape reading the file meanwhile always reads it whole.
Everything is read back by prometheus-client's own multi-process collector."""
import glob
import os
import threading
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, multiprocess
from prometheus_client.mmap_dict import MmapedDict

from kserve_sdk.internals import prometheus_values
from kserve_sdk.internals.prometheus_values import SlotValue, let_go
from kserve_sdk.internals.prometheus_writers import SlotCount, SlotGaps, SlotHistogram

HELP = "a model's series"


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A metrics directory of this test's own: the module's files (with their values and holders) start empty."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(prometheus_values, "_files", {})
    return tmp_path


def counter(model: str) -> SlotValue:
    return SlotValue("counter", "requests", "requests_total", ["model_name"], [model], HELP)


def histogram(model: str):
    """A histogram's child as prometheus-client makes it in multi-process mode: a value per bucket, a sum."""
    buckets = [SlotValue("histogram", "latency", "latency_bucket", ["model_name", "le"], [model, le], HELP)
               for le in ("0.1", "1.0", "+Inf")]
    total = SlotValue("histogram", "latency", "latency_sum", ["model_name"], [model], HELP)
    return SimpleNamespace(_buckets=buckets, _sum=total, _upper_bounds=[0.1, 1.0, float("inf")])


def scraped(directory) -> dict:
    """{(sample name, model name): value} of every series in the directory's files, as a scrape reads them."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    return {(sample.name, sample.labels.get("model_name")): sample.value
            for family in registry.collect() for sample in family.samples if "le" not in sample.labels}


def test_a_series_let_go_reads_0_then_leaves_the_file_and_counts_from_0_when_made_again(files):
    kept = counter("kept")
    kept.inc(5)
    gone = counter("gone")
    gone.inc(3)
    let_go([SimpleNamespace(_value=gone)])
    assert scraped(files) == {("requests_total", "kept"): 5.0, ("requests_total", "gone"): 0.0}
    again = counter("gone")
    again.inc(1)
    assert scraped(files)[("requests_total", "gone")] == 1.0

    for i in range(2000):  # enough series let go to compact the file: every one of them leaves it
        value = counter(f"m{i}")
        value.inc(1)
        let_go([SimpleNamespace(_value=value)])
    samples = scraped(files)
    assert len(samples) < 2000 / 2, f"{len(samples)} series after 2000 let go"
    assert all(value == 0.0 for (_, model), value in samples.items() if model not in ("kept", "gone"))
    kept.inc(2)
    again.inc(1)
    samples = scraped(files)
    assert (samples[("requests_total", "kept")], samples[("requests_total", "gone")]) == (7.0, 2.0)


def test_writers_keep_counting_into_the_compacted_file(files):
    requests, latency = counter("live"), histogram("live")
    count = SlotCount(requests)
    observe = SlotHistogram(latency._upper_bounds, latency._buckets, latency._sum)
    gaps = SlotGaps(observe, 0.1)
    count.inc(2)
    observe.observe(0.5)
    for i in range(1000):
        let_go([SimpleNamespace(_value=counter(f"m{i}")), histogram(f"m{i}")])
    for path in glob.glob(f"{files}/*.db"):  # compacted: far fewer entries than were written
        entries = len(list(MmapedDict.read_all_values_from_file(path)))
        assert entries < 500, f"{path}: {entries} entries"
    count.inc(1)
    observe.observe(5.0)
    gaps.add_least(2, 0.1)
    samples = scraped(files)
    assert samples[("requests_total", "live")] == 3.0
    assert samples[("latency_count", "live")] == 4.0
    assert samples[("latency_sum", "live")] == pytest.approx(5.6)
    assert requests.get() == 3.0 and latency._buckets[0].get() == 2.0


def test_files_and_their_index_stay_the_size_of_the_series_in_use(files):
    """A model's series made and let go, one model after another: after the first few hundred, neither the files
    nor their index grow any more."""
    def one_model(i: int) -> None:
        value, times = counter(f"m{i:05d}"), histogram(f"m{i:05d}")
        value.inc(1)
        let_go([SimpleNamespace(_value=value), times])

    def sizes():
        index = sum(len(file._starts) for file in prometheus_values._files.values())
        return sum(os.path.getsize(path) for path in glob.glob(f"{files}/*.db")), index

    peak = (0, 0)
    for i in range(300):
        one_model(i)
        peak = max(peak, sizes())
    for i in range(300, 3000):
        one_model(i)
        now = sizes()
        assert now[0] <= peak[0] and now[1] <= peak[1], f"after {i + 1} models: {now} above {peak}"


def test_a_scrape_meanwhile_reads_each_file_whole(files):
    live = {f"live{i}": counter(f"live{i}") for i in range(20)}
    for value in live.values():
        value.inc(1)
    failures, reads, done = [], [0], threading.Event()

    def scrape_until_done() -> None:
        while not done.is_set():
            try:
                samples = scraped(files)
            except Exception as e:  # a half-written file: a bad length, a broken key
                failures.append(repr(e))
                return
            missing = [name for name in live if samples.get(("requests_total", name)) != 1.0]
            if missing:
                failures.append(f"{len(missing)} live series missing or wrong")
                return
            reads[0] += 1

    reader = threading.Thread(target=scrape_until_done)
    reader.start()
    try:
        for i in range(20000):
            let_go([SimpleNamespace(_value=counter(f"{i:06d}" + "x" * 40))])
            if failures or (i > 5000 and reads[0] >= 50):
                break
    finally:
        done.set()
        reader.join(30)
    assert not failures, failures
    assert reads[0] >= 5
