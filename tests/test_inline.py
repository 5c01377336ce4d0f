"""Quick sync stages run on the event loop (no thread hand-off); slow ones, or any under a deadline, on threads."""
from helpers import post_json

WHERE = "/v1/models/where:predict"


def _ran_on(server, seconds: float = 0) -> str:
    status, _, body = post_json(server.http_port, WHERE, {"instances": [seconds]})
    assert status == 200, body
    return body["predictions"][0]


def test_a_quick_sync_predict_moves_to_the_loop_and_a_slow_call_sends_it_back(start_server):
    # a limit far above a trivial call's time, so a busy machine cannot make one look slow
    server = start_server("tests/models/zoo.py", "--inline_sync_below_ms", "100", env={"ZOO_MODELS": "where"},
                          grpc=False)
    first = [_ran_on(server) for _ in range(16)]
    assert all(name.startswith("model-") for name in first), first  # proving itself on the pool
    assert _ran_on(server) == "MainThread"  # 16 quick calls: it runs on the loop now
    assert _ran_on(server, 0.3) == "MainThread"  # a slow call on the loop ...
    after = [_ran_on(server) for _ in range(32)]
    assert all(name.startswith("model-") for name in after), after  # ... sends it back for 32 quick calls
    assert _ran_on(server) == "MainThread"


def test_slow_calls_on_the_pool_do_not_undo_the_quick_ones(start_server):
    # On the pool a quick call can look slow (it waits for the GIL while the loop holds it): slow calls
    # there must not reset the count, or a busy server would never move a quick model to the loop.
    server = start_server("tests/models/zoo.py", "--inline_sync_below_ms", "100", env={"ZOO_MODELS": "where"},
                          grpc=False)
    names, quick = [], 0
    for _ in range(40):  # quick and slow (0.2 s, over the limit) calls alternate, until one runs on the loop
        names.append(_ran_on(server))
        if names[-1] == "MainThread":
            break
        quick += 1
        names.append(_ran_on(server, 0.2))
        if names[-1] == "MainThread":
            break
    assert names[-1] == "MainThread", names  # it moved to the loop, slow calls in between notwithstanding
    assert quick >= 16, names  # ... and only after 16 quick calls on the pool


def test_slow_predicts_never_leave_the_pool(start_server):
    server = start_server("tests/models/zoo.py", env={"ZOO_MODELS": "where"}, grpc=False)
    names = [_ran_on(server, 0.002) for _ in range(24)]  # over the default 1 ms
    assert all(name.startswith("model-") for name in names), names


def test_off_with_zero_and_under_a_deadline(start_server):
    off = start_server("tests/models/zoo.py", "--inline_sync_below_ms", "0", env={"ZOO_MODELS": "where"}, grpc=False)
    names = [_ran_on(off) for _ in range(24)]
    assert "MainThread" not in names, names
    timed = start_server("tests/models/zoo.py", "--request_timeout_seconds", "5", "--inline_sync_below_ms", "100",
                         env={"ZOO_MODELS": "where"}, grpc=False)
    names = [_ran_on(timed) for _ in range(24)]  # a deadline could not stop a call running on the loop
    assert "MainThread" not in names, names
