"""hack/bench/bench_report.py: issue 21's acceptance checks, one line each, on results shaped as run_all writes them."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "hack", "bench"))
import bench_report  # noqa: E402


def cell(target, case, conc, rps, ratio=None, p99=None, p999=None):
    """One load cell as run_all.cell writes it."""
    return {"target": target, "case": case, "conc": conc, "rps": rps, "p50_ms": None, "p99_ms": p99,
            "p999_ms": p999, "cpu_ms_per_req": None, "peak_mib": None, "errors": {}, "note": "",
            "round_rps": [rps], "ratio": ratio or {}}


def results():
    http = [cell("ours", "v1-small", 32, 900, {"bare": 0.9, "kserve": 2.5, "litserve": 2.2, "bentoml": 2.4}, 10, 20),
            cell("bare", "v1-small", 32, 1000, {"kserve": 2.78}, p99=8, p999=12),
            cell("kserve", "v1-small", 32, 360, p99=40, p999=60),
            cell("litserve", "v1-small", 32, 400, p99=30, p999=50),
            cell("bentoml", "v1-small", 32, 370, p99=35, p999=55),
            cell("ours", "v2-json-1mib", 4, 20, {"bare": 0.8, "kserve": 9}),
            cell("litserve", "v2-json-1mib", 4, None)]
    grpc = [cell("ours", "grpc-small", 32, 800, {"bare": 0.84, "kserve": 1.6}, 12, 30),
            cell("bare", "grpc-small", 32, 950, {"kserve": 1.4}),
            cell("kserve", "grpc-small", 32, 500, p99=11, p999=25)]
    stream = [cell("ours", "sse-stream", 8, 10000, {"mlserver": 3.5, "litserve": 10}),
              cell("litserve", "sse-stream", 8, 1000),
              cell("ours", "grpc-stream", 8, 1500, {"bare": 0.9, "mlserver": 1.2})]
    cost = {"requests": 400, "grpc": {"kinstr": {"bare": 618, "ours": 700}},
            "rest": {"kinstr": {"bare": 500, "ours": 540}}}
    return {"groups": {"http": {"cells": http}, "grpc": {"cells": grpc}, "stream": {"cells": stream},
                       "cost": cost}}


def checks_by(checks):
    return {(c["check"], c["cell"]): c for c in checks}


def test_issue_21_targets_each_give_one_check():
    got = checks_by(bench_report.acceptance(results()))
    assert got[("×ceiling", "http v1-small@c32")]["target"] == 0.85
    assert got[("×KServe (small)", "http v1-small@c32")]["target"] == 2
    assert got[("×KServe (small)", "grpc grpc-small@c32")]["target"] == 1.5
    assert got[("×LitServe", "http v1-small@c32")]["target"] == 2
    assert got[("×BentoML", "http v1-small@c32")]["target"] == 3
    assert got[("×LitServe", "stream sse-stream@c8")]["pass"] is True
    assert got[("×MLServer (SSE)", "stream sse-stream@c8")]["target"] == 3
    assert got[("×ceiling", "stream grpc-stream@c8")]["target"] == 0.85
    assert ("×MLServer (SSE)", "stream grpc-stream@c8") not in got  # gRPC streams: against the ceiling only


def test_verdicts_follow_the_values():
    got = checks_by(bench_report.acceptance(results()))
    assert got[("×ceiling", "http v1-small@c32")]["pass"] is True
    assert got[("×ceiling", "http v2-json-1mib@c4")]["pass"] is False
    assert got[("×ceiling", "grpc grpc-small@c32")]["pass"] is False
    assert got[("×BentoML", "http v1-small@c32")]["pass"] is False
    p99 = got[("p99 ≤ KServe's (ms)", "grpc grpc-small@c32")]
    assert (p99["value"], p99["target"], p99["pass"]) == (12, 11, False)
    assert got[("p99 ≤ KServe's (ms)", "http v1-small@c32")]["pass"] is True
    assert got[("k instructions per request", "cost grpc-small ours")]["pass"] is False
    rest = got[("instructions ÷ bare Tornado's", "cost rest-v2-small ours")]
    assert rest["value"] == 540 / 500 and rest["pass"] is True


def test_a_peer_is_checked_only_where_it_served():
    got = checks_by(bench_report.acceptance(results()))
    assert ("×LitServe", "http v2-json-1mib@c4") not in got
    assert ("×BentoML", "stream sse-stream@c8") not in got


def test_markdown_has_a_line_per_check_and_the_tail_table():
    md = bench_report.summary_markdown(results())
    assert "| ×BentoML | http v1-small@c32 | 2.40 | >= 3.00 | 0.80 | - | **missed** |" in md
    assert "| ×LitServe | http v1-small@c32 | 2.20 | >= 2.00 | 1.10 | - | met |" in md
    tail = "| http | v1-small@c32 | 8.00 / 12.00 | 10.00 / 20.00 | 40.00 / 60.00 | 30.00 / 50.00 | 35.00 / 55.00 |"
    assert tail in md


def test_a_kserve_target_is_shown_beside_the_ceilings_own_ratio():
    md = bench_report.summary_markdown(results())
    assert "| ×KServe (small) | http v1-small@c32 | 2.50 | >= 2.00 | 1.25 | 2.78 | met |" in md
    assert "| ×KServe (small) | grpc grpc-small@c32 | 1.60 | >= 1.50 | 1.07 | 1.40 | met |" in md
    # only the gRPC cell's ceiling (1.4x KServe) is below its target (1.5)
    assert "The ceiling itself misses 1 of these targets in this run (grpc grpc-small@c32)" in md


def cb_results():
    """The cb group as run_all.group_cb writes it: cb at 1 and 32 streams, together and apart, with its TTFT in
    steps, and the bare server beside it."""
    cb = [dict(cell("cb", "cb-stream", 1, 600, {"unbatched": 1.0, "litserve": 1.3}, p99=8),
               p50_ms=2.5, step_ms=1.5, ttft_p50_steps=1.7, ttft_p99_steps=5.3),
          dict(cell("cb", "cb-stream", 32, 6000, {"unbatched": 10.3, "litserve": 1.1}, p99=9),
               p50_ms=4, step_ms=1.8, ttft_p50_steps=2.2, ttft_p99_steps=5.0),
          dict(cell("cb", "cb-stagger", 32, 5900, {"unbatched": 10.1, "litserve": 1.1}, p99=11),
               p50_ms=5, step_ms=1.8, ttft_p50_steps=2.8, ttft_p99_steps=6.1),
          dict(cell("bare", "cb-stagger", 32, 6100, p99=10), p50_ms=4.5, step_ms=1.8, ttft_p50_steps=2.5,
               ttft_p99_steps=5.6),
          cell("unbatched", "cb-stream", 32, 582), cell("litserve", "cb-stream", 32, 5400, p99=400)]
    return {"groups": {"cb": {"cells": cb}}}


def test_issue_33_goals_are_checked_at_their_concurrencies():
    got = checks_by(bench_report.acceptance(cb_results()))
    assert got[("×unbatched (tok/s)", "cb cb-stream@c32")]["pass"] is True
    ttft = got[("TTFT p99 (unloaded steps)", "cb cb-stream@c32")]
    assert (ttft["value"], ttft["target"], ttft["pass"], ttft["ceiling"]) == (5.0, 5, True, None)
    assert got[("×LitServe loop (tok/s)", "cb cb-stream@c1")]["pass"] is True
    assert got[("×LitServe loop (tok/s)", "cb cb-stream@c32")]["pass"] is False
    assert ("×unbatched (tok/s)", "cb cb-stream@c1") not in got  # the 8x goal is at 32 streams only
    assert ("TTFT p99 (unloaded steps)", "cb cb-stream@c1") not in got


def test_streams_beginning_apart_are_checked_for_their_ttft_beside_the_bare_servers():
    got = checks_by(bench_report.acceptance(cb_results()))
    ttft = got[("TTFT p99 (unloaded steps)", "cb cb-stagger@c32")]
    assert (ttft["value"], ttft["pass"], ttft["ceiling"]) == (6.1, False, 5.6)
    assert ("×LitServe loop (tok/s)", "cb cb-stagger@c32") not in got  # rates are judged on the bursts' cells
    md = bench_report.summary_markdown(cb_results())
    assert "The ceiling itself misses 1 of these targets in this run (cb cb-stagger@c32)" in md


def test_cb_table_shows_every_target_and_the_ttft_in_steps():
    md = bench_report.summary_markdown(cb_results())
    assert ("| 32 | together | 6000 | 582 | 5400 | - | 10.30 | 1.10 | 4.0 / 9.0 | 2.2 / 5.0 | - | 1.800 | "
            "- / 400.0 |") in md
    assert "| 32 | apart | 5900 | - | - | 6100 | 10.10 | 1.10 | 5.0 / 11.0 | 2.8 / 6.1 | 2.5 / 5.6 | 1.800 | - |" in md


def test_cb_rate_checks_show_the_step_alone_as_their_ceiling():
    got = checks_by(bench_report.acceptance(cb_results()))
    # 32 rows per 1.8 ms step, over the references' tokens/s
    assert round(got[("×LitServe loop (tok/s)", "cb cb-stream@c32")]["ceiling"], 3) == round(32000 / 1.8 / 5400, 3)
    assert round(got[("×unbatched (tok/s)", "cb cb-stream@c32")]["ceiling"], 3) == round(32000 / 1.8 / 582, 3)
    assert got[("×LitServe loop (tok/s)", "cb cb-stream@c1")]["ceiling"] is None  # no litserve cell at c1
