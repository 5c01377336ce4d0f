"""The supervisor of ``--workers N`` (kserve_sdk/server/workers.py), against real servers of tests/models/supervised.py.

A worker killed by a signal is replaced after a delay that doubles while deaths come close together; a crash loop
stops the server with exit status 1 and one line; deaths spread out over time never do; a dead worker's metric
files are folded away with its counts kept; a flood of settings changes leaves the control directory small and
a new worker in the state the others are in.
"""
import datetime
import glob
import http.client
import json
import os
import re
import signal
import statistics
import threading
import time
from typing import List, Set, Tuple

import pytest

from helpers import eventually, post_json, request, scrape, side_by_side
from kserve_sdk.server.workers import compacted

MODEL = "tests/models/supervised.py"


def _workers(server) -> Set[int]:
    """The PIDs of the server's live worker processes."""
    pid = server.proc.pid
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        children = {int(child) for child in f.read().split()}
    return {child for child in children if _state(child) not in ("Z", "X", "")}


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return ""


def _who(server, x: int = 1) -> dict:
    """One call of the model ``who``: which worker answered, with what log settings (checks its answer)."""
    status, _, body = post_json(server.http_port, "/v1/models/who:predict", {"instances": [x]})
    assert status == 200 and body["predictions"] == [2 * x], (status, body)
    return body


def _both_serve(server, count: int = 2) -> Set[int]:
    """The workers once there are ``count`` of them and each has answered a call."""
    pids = eventually(lambda: len(_workers(server)) == count and _workers(server), 30, message=server.log)
    answered = side_by_side(lambda: _who(server)["pid"], lambda got: set(got) >= pids)
    assert set(answered) == pids, (answered, pids)
    return pids


def _new_worker(server, old: Set[int]) -> int:
    """The worker that replaced one of ``old``, once it answers calls."""
    fresh = eventually(lambda: (_workers(server) - old) or None, 30, message=server.log)
    (pid,) = fresh
    side_by_side(lambda: _who(server)["pid"], lambda got: pid in got)
    return pid


def _logged_at(log: str, text: str) -> datetime.datetime:
    """The time stamp of the log line holding ``text``."""
    (line,) = [line for line in log.splitlines() if text in line]
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f")


def test_a_killed_worker_is_replaced_after_a_delay_that_doubles(start_server):
    server = start_server(MODEL, "--workers", "2", grpc=False)
    pids = _both_serve(server)
    first = min(pids)
    os.kill(first, signal.SIGKILL)
    server.log_with(f"worker {first} exited (killed by signal 9); starting a new one in 0.1 s "
                    "(1 exit within 60 s; 5 stop the server)")
    second = _new_worker(server, pids)
    os.kill(second, signal.SIGSEGV)  # close to the first death: twice the delay
    died = f"worker {second} exited (killed by signal 11); starting a new one in 0.2 s (2 exits within 60 s"
    started = f"started in place of worker {second}"
    log = server.log_with(started)
    assert (_logged_at(log, started) - _logged_at(log, died)).total_seconds() >= 0.19, log
    third = _new_worker(server, pids | {second})
    assert _workers(server) == pids - {first} | {third}
    assert server.proc.poll() is None


def test_workers_stop_when_their_parent_is_killed_outright(start_server, tmp_path):
    # (a parent killed outright leaves its control and metrics folders: in tmp_path, not the machine's /tmp)
    server = start_server(MODEL, "--workers", "2", grpc=False, env={"TMPDIR": str(tmp_path)})
    pids = _both_serve(server)
    os.kill(server.proc.pid, signal.SIGKILL)
    server.wait_exit(10)
    eventually(lambda: not _alive_any(pids), 30, message=server.log)
    assert server.log().count("Stopping the model server (signal 15)") == 2


def test_a_crash_loop_stops_the_server_with_exit_status_1(start_server, tmp_path):
    crash = tmp_path / "crash"
    server = start_server(MODEL, "--workers", "2", grpc=False, env={"CRASH_ALWAYS": str(crash)})
    pids = _both_serve(server)
    crash.touch()  # from now on, every new worker crashes as it starts
    os.kill(min(pids), signal.SIGKILL)
    assert server.wait_exit(60) == 1, server.log()
    log = server.log()
    delays = re.findall(r"starting a new one in ([0-9.]+) s", log)
    assert delays == ["0.1", "0.2", "0.4", "0.8"], log
    assert log.count("killed by signal 11") == 4, log
    gave_up = [line for line in log.splitlines() if "restarting is not helping" in line]
    assert len(gave_up) == 1, log
    assert re.search(r"worker \d+ exited \(killed by signal 11\): 5 workers exited within 60 s "
                     r"\(KSERVE_SDK_WORKER_RESTARTS=5, KSERVE_SDK_WORKER_RESTART_WINDOW=60\); restarting is not "
                     r"helping, stopping the server with exit status 1", gave_up[0]), gave_up[0]
    assert "Traceback" not in log
    assert not _alive_any(pids)


def _alive_any(pids: Set[int]) -> bool:
    return any(_state(pid) not in ("", "Z", "X") for pid in pids)


def test_deaths_spread_over_time_never_stop_the_server(start_server, tmp_path):
    """Three deaths within 1.5 s would stop it; each round has two (a kill, then a worker crashing at start), and
    the rounds are 2 s apart. Ten deaths in all: a count over the server's life would have stopped it."""
    once = tmp_path / "crash-once"
    server = start_server(MODEL, "--workers", "2", grpc=False, env={
        "CRASH_ONCE": str(once), "KSERVE_SDK_WORKER_RESTARTS": "3", "KSERVE_SDK_WORKER_RESTART_WINDOW": "1.5"})
    pids = _both_serve(server)
    for round_ in range(1, 6):
        once.touch()
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        log = server.log_with(f"worker {victim} exited (killed by signal 9); starting a new one in 0.1 s "
                              "(1 exit within 1.5 s; 3 stop the server)")
        eventually(lambda n=2 * round_: server.log().count("started in place of") == n, 30, message=server.log)
        assert not once.exists() and server.log().count("killed by signal 11") == round_, log
        pids = _both_serve(server)
        time.sleep(2.0)  # the next round's deaths are out of this one's window
    assert server.proc.poll() is None and "restarting is not helping" not in server.log()
    assert _who(server, 21)["predictions"] == [42]


def test_a_dead_workers_metric_files_go_and_its_counts_stay(start_server, tmp_path):
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    server = start_server(MODEL, "--workers", "2", grpc=False, env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)})
    pids = _both_serve(server)
    victim = min(pids)
    assert glob.glob(str(metrics_dir / f"*_{victim}.*")), os.listdir(metrics_dir)  # it counted calls
    # the request counter is written just after the answer: wait until it caught up with Triton's count
    before = eventually(lambda: (counts := _counts(server))[0] == counts[1] and counts, 10)
    os.kill(victim, signal.SIGKILL)
    eventually(lambda: len(_workers(server)) == 2 and victim not in _workers(server), 30, message=server.log)
    eventually(lambda: not glob.glob(str(metrics_dir / f"*_{victim}.*")), 10,
               message=lambda: str(sorted(os.listdir(metrics_dir))))
    assert _counts(server) == before  # no call since: the dead worker's counts are still in the totals


def _counts(server) -> Tuple[float, int]:
    """(kserve_requests_total of the model's v1 predict calls, Triton's inference_count) over all workers."""
    samples = scrape(server)
    total = sum(v for (name, labels), v in samples.items()
                if name == "kserve_requests_total" and {("model_name", "who"), ("endpoint", "predict")} <= labels)
    status, _, body = request(server.http_port, "GET", "/v2/models/who/stats")
    assert status == 200, body
    return total, json.loads(body)["model_stats"][0]["inference_count"]


@pytest.mark.timeout(300)  # 5,000 changes, each answered once both workers have it
def test_a_flood_of_log_settings_changes_keeps_the_control_directory_small(start_server, tmp_path):
    """5,000 changes of /v2/logging from two clients at once, with --workers 2: the control directory stays
    small and the last changes take about as long as the first; calls answered meanwhile are right; a worker
    started afterwards is in the state the others are in."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    server = start_server(MODEL, "--workers", "2", grpc=False, env={"TMPDIR": str(tmp)})
    pids = _both_serve(server)
    (control,) = glob.glob(str(tmp / "kserve-sdk-control-*"))
    done = threading.Event()
    answered: List[int] = []
    failures: List[BaseException] = []

    def infer() -> None:
        try:
            while not done.is_set():
                answered.append(_who(server, 3)["pid"])
        except BaseException as e:  # told by the test, not lost in the thread
            failures.append(e)

    caller = threading.Thread(target=infer)
    caller.start()
    try:
        timings: List[List[float]] = [[], []]
        flooders = [threading.Thread(target=_change_log_settings, args=(server.http_port, 2500, timings[i]))
                    for i in range(2)]
        for thread in flooders:
            thread.start()
        for thread in flooders:
            thread.join(300)
    finally:
        done.set()
        caller.join(30)
    assert all(len(t) == 2500 for t in timings), [len(t) for t in timings]
    files = os.listdir(control)
    assert len(files) <= 80, (len(files), sorted(files)[:10])
    first = statistics.median(timings[0][:200] + timings[1][:200])
    last = statistics.median(timings[0][-200:] + timings[1][-200:])
    assert last <= 3 * first + 0.05, (first, last)
    assert failures == [] and answered and set(answered) <= pids, (failures, set(answered))
    status, _, _ = post_json(server.http_port, "/v2/logging", {"log_warning": False, "log_verbose_level": 0})
    assert status == 200
    seen = side_by_side(lambda: _who(server), lambda got: {a["pid"] for a in got} >= pids)
    assert all(not a["log_settings"]["log_warning"] for a in seen), seen
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    fresh = _new_worker(server, pids)
    from_fresh = side_by_side(lambda: _who(server), lambda got: fresh in {a["pid"] for a in got})
    assert all(not a["log_settings"]["log_warning"] for a in from_fresh if a["pid"] == fresh), from_fresh


def _change_log_settings(port: int, count: int, timings: List[float]) -> None:
    """``count`` changes of the log settings on one connection, each one's duration appended to ``timings``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for i in range(count):
            body = json.dumps({"log_warning": i % 2 == 0}).encode()
            started = time.perf_counter()
            conn.request("POST", "/v2/logging", body, {"Content-Type": "application/json"})
            answer = conn.getresponse()
            answer.read()
            timings.append(time.perf_counter() - started)
            assert answer.status == 200
    finally:
        conn.close()


def test_compaction_keeps_what_a_new_worker_needs():
    changes = [
        ("01", "log_settings", "", {"log_info": False}, 1),
        ("02", "shm_register", "a", {"key": "/a", "offset": 0, "byte_size": 8}, 1),
        ("03", "load", "m", {}, 2),
        ("04", "log_settings", "", {"log_verbose_level": 1}, 2),
        ("05", "shm_register", "b", {"key": "/b", "offset": 0, "byte_size": 8}, 1),
        ("06", "shm_unregister", "a", {}, 1),
        ("07", "unload", "m", {}, 1),
        ("08", "trace_settings", "", {"scope": {"trace_rate": "2"}}, 1),
        ("09", "trace_settings", "", {"scope": {"trace_rate": "3"}}, 2),
        ("10", "log_settings", "", {"log_info": True}, 1),
        ("11", "shm_register", "c", {"key": "/c", "offset": 0, "byte_size": 8}, 2),
        ("12", "shm_unregister", "", {}, 2),
        ("13", "shm_register", "d", {"key": "/d", "offset": 0, "byte_size": 8}, 1),
    ]
    assert compacted(changes) == [
        ("07", "unload", "m", {}, 1),
        ("09", "trace_settings", "", {"scope": {"trace_rate": "3"}}, 2),
        ("10", "log_settings", "", {"log_info": True, "log_verbose_level": 1}, 1),
        ("13", "shm_register", "d", {"key": "/d", "offset": 0, "byte_size": 8}, 1),
    ]
