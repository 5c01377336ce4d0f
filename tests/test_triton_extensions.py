"""Triton's logging extension (GET/POST /v2/logging, gRPC LogSettings) and model configuration extension
(GET /v2/models/<m>[/versions/<v>]/config, gRPC ModelConfig), through tritonclient HTTP and gRPC, the raw
gRPC stub and raw HTTP, on a real server (tests/models/triton_extensions.py); the log settings also on
--workers 2, where both workers must apply them.

The log tests read the server's log: the lines of the ``kserve`` logger are written as they are logged, so
a line logged before an answer is in the file once the answer is back.
"""
import json
import os
import re
import signal
import time
from typing import List

import grpc
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from helpers import eventually, post_json, request
from kserve_sdk.logging import LINES_WAIT_S

SCRIPT = "tests/models/triton_extensions.py"
DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True, "log_verbose_level": 0,
            "log_format": "default"}
RESET = {key: None for key in DEFAULTS}  # null: back to the settings at start-up


@pytest.fixture(scope="module")
def server(start_server):
    return start_server(SCRIPT, "--model_name", "batched", "--max_batch_size", "8", "--max_batch_latency_ms", "5")


@pytest.fixture
def fresh(server):
    """The server with its start-up log settings, before and after the test."""
    assert post_json(server.http_port, "/v2/logging", RESET)[0] == 200
    yield server
    assert post_json(server.http_port, "/v2/logging", RESET)[0] == 200


@pytest.fixture
def stub(server):
    channel = grpc.insecure_channel(server.grpc_url)
    try:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    finally:
        channel.close()


def http_client(server) -> thttp.InferenceServerClient:
    return thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}")


def predict(server, model="plain") -> int:
    """A v1 predict; the pid of the worker that answered."""
    status, _, body = post_json(server.http_port, f"/v1/models/{model}:predict", {"instances": [1]})
    assert status == 200, body
    return body["predictions"][0]


def predict_logged(server, model="plain") -> int:
    """``predict``, then a wait well past the server's LINES_WAIT_S: a call's access and latency lines wait
    that long for others to share their write, so they are in the log by then (a check that a line is
    absent relies on it)."""
    pid = predict(server, model)
    time.sleep(LINES_WAIT_S * 10)
    return pid


def log_after(server, mark: int, holding: str = "") -> str:
    """What the server logged since ``mark`` (a length of its log), once it holds ``holding`` (10 s at
    most)."""
    if not holding:
        return server.log()[mark:]

    def since_mark() -> str:
        log = server.log()[mark:]
        assert holding in log, f"{holding!r} not logged since the mark:\n{log[-3000:]}"
        return log

    return eventually(since_mark, timeout=10, interval=0.02)


# --- logging: reading and changing ---------------------------------------------------------------------
def test_get_answers_every_setting_on_every_protocol(fresh):
    assert http_client(fresh).get_log_settings() == DEFAULTS
    status, headers, body = request(fresh.http_port, "GET", "/v2/logging")
    assert status == 200 and headers["content-type"] == "application/json" and json.loads(body) == DEFAULTS
    client = tgrpc.InferenceServerClient(fresh.grpc_url)
    got = client.get_log_settings(as_json=True)["settings"]
    assert got == {"log_file": {"string_param": ""}, "log_info": {"bool_param": True},
                   "log_warning": {"bool_param": True}, "log_error": {"bool_param": True},
                   "log_verbose_level": {"uint32_param": 0}, "log_format": {"string_param": "default"}}
    message = client.get_log_settings()
    assert message.settings["log_verbose_level"].uint32_param == 0 and message.settings["log_info"].bool_param


def test_server_metadata_names_both_extensions(server):
    extensions = http_client(server).get_server_metadata()["extensions"]
    assert "logging" in extensions and "model_configuration" in extensions


def test_verbose_level_turns_debug_lines_on_and_off_over_http(fresh):
    mark = len(fresh.log())
    pid = predict(fresh)
    assert f"predict-info of plain in {pid}" in log_after(fresh, mark)
    assert "predict-debug" not in log_after(fresh, mark)

    answer = http_client(fresh).update_log_settings({"log_verbose_level": 1})
    assert answer == {**DEFAULTS, "log_verbose_level": 1}  # every setting, not only the changed one
    mark = len(fresh.log())
    pid = predict(fresh)
    lines = log_after(fresh, mark)
    assert re.search(rf" {pid} kserve DEBUG \[.*\] predict-debug of plain in {pid}", lines), lines
    assert "predict-verbose2" not in lines  # level 9 needs verbose level 2

    http_client(fresh).update_log_settings({"log_verbose_level": 2})
    mark = len(fresh.log())
    pid = predict(fresh)
    assert f"predict-verbose2 of plain in {pid}" in log_after(fresh, mark)

    http_client(fresh).update_log_settings({"log_verbose_level": 0})
    mark = len(fresh.log())
    pid = predict(fresh)
    lines = log_after(fresh, mark)
    assert f"predict-info of plain in {pid}" in lines and "predict-debug" not in lines


def test_verbose_level_over_grpc(fresh):
    client = tgrpc.InferenceServerClient(fresh.grpc_url)
    answer = client.update_log_settings({"log_verbose_level": 1}, as_json=True)["settings"]
    assert answer["log_verbose_level"] == {"uint32_param": 1} and answer["log_info"] == {"bool_param": True}
    assert http_client(fresh).get_log_settings()["log_verbose_level"] == 1
    mark = len(fresh.log())
    pid = predict(fresh)
    assert f"predict-debug of plain in {pid}" in log_after(fresh, mark)


def test_info_warning_and_error_switch_their_own_lines(fresh):
    client = http_client(fresh)
    client.update_log_settings({"log_warning": False})  # a gap: info on, warnings off
    mark = len(fresh.log())
    pid = predict(fresh)
    lines = log_after(fresh, mark)
    assert f"predict-info of plain in {pid}" in lines and "predict-warning" not in lines

    mark = len(fresh.log())
    predict_logged(fresh)
    lines = log_after(fresh, mark)
    assert "tornado.access" in lines and "kserve.trace" in lines  # the access and latency lines, at INFO

    client.update_log_settings({"log_info": False, "log_warning": True})
    mark = len(fresh.log())
    pid = predict_logged(fresh)
    lines = "\n".join(line for line in log_after(fresh, mark).splitlines()
                      if " kserve.audit " not in line)  # the audit line of a change stays on (docs/security.md)
    assert f"predict-warning of plain in {pid}" in lines and "predict-info" not in lines
    assert " INFO " not in lines and "tornado.access" not in lines and "kserve.trace" not in lines, lines

    client.update_log_settings({"log_info": False, "log_warning": False, "log_error": False})
    mark = len(fresh.log())
    predict(fresh)
    assert "predict-" not in log_after(fresh, mark)


def test_a_change_is_logged_while_info_is_on(fresh):
    client = http_client(fresh)
    mark = len(fresh.log())
    client.update_log_settings({"log_info": False})
    assert "log settings now" not in log_after(fresh, mark)
    client.update_log_settings({"log_info": True})
    assert re.search(r" kserve INFO .*log settings now .*'log_info': True", log_after(fresh, mark))


def test_log_format_iso8601_and_back(fresh):
    client = http_client(fresh)
    assert client.update_log_settings({"log_format": "ISO8601"})["log_format"] == "ISO8601"
    mark = len(fresh.log())
    pid = predict_logged(fresh)
    line = next(line for line in log_after(fresh, mark).splitlines() if "predict-info" in line)
    assert re.match(rf"\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{3}}Z {pid} kserve INFO ", line), line
    access = [line for line in log_after(fresh, mark, "POST /v1/models/plain:predict").splitlines()
              if "POST /v1/models/plain:predict" in line]
    assert access and re.match(rf"\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{3}}Z {pid} tornado.access ",
                               access[0]), access

    client.update_log_settings({"log_format": "default"})
    mark = len(fresh.log())
    predict_logged(fresh)
    lines = log_after(fresh, mark, "POST /v1/models/plain:predict").splitlines()
    for kind in ("predict-info", "POST /v1/models/plain:predict"):
        line = next(line for line in lines if kind in line)
        assert re.match(rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{{3}} {pid} ", line), line


def test_null_puts_a_setting_back_as_at_start_up(fresh):
    client = http_client(fresh)
    client.update_log_settings({"log_verbose_level": 3, "log_format": "ISO8601"})
    assert client.update_log_settings({"log_verbose_level": None}) == {**DEFAULTS, "log_format": "ISO8601"}
    grpc_client = tgrpc.InferenceServerClient(fresh.grpc_url)  # tritonclient sends None as an empty value
    assert grpc_client.update_log_settings({"log_format": None}, as_json=True)["settings"]["log_format"] == {
        "string_param": "default"}


def test_an_empty_log_file_is_the_console_and_accepted(fresh):
    assert http_client(fresh).update_log_settings({"log_file": ""}) == DEFAULTS
    assert post_json(fresh.http_port, "/v2/logging", {})[2] == DEFAULTS  # nothing to change: the settings


# --- logging: bad values ------------------------------------------------------------------------------
BAD_SETTINGS = [
    ({"log_verbos_level": 1}, "unknown log setting 'log_verbos_level': the settings are log_file, log_info"),
    ({"log_warnings": False}, "unknown log setting 'log_warnings' (did you mean 'log_warning'?)"),
    ({"log_errors": False}, "unknown log setting 'log_errors' (did you mean 'log_error'?)"),
    ({"log_info": "yes"}, "log setting 'log_info' must be true or false, got 'yes'"),
    ({"log_warning": 1}, "log setting 'log_warning' must be true or false, got 1"),
    ({"log_error": []}, "log setting 'log_error' must be true or false, got []"),
    ({"log_verbose_level": -1}, "log setting 'log_verbose_level' must be an integer from 0 to 4294967295, got -1"),
    ({"log_verbose_level": 2 ** 32}, "must be an integer from 0 to 4294967295, got 4294967296"),
    ({"log_verbose_level": 1.5}, "log setting 'log_verbose_level' must be an integer from 0 to 4294967295, got 1.5"),
    ({"log_verbose_level": True}, "log setting 'log_verbose_level' must be an integer from 0 to 4294967295, got True"),
    ({"log_verbose_level": "1"}, "log setting 'log_verbose_level' must be an integer from 0 to 4294967295, got '1'"),
    ({"log_format": "json"}, "log setting 'log_format' must be one of default, ISO8601, got 'json'"),
    ({"log_format": 1}, "log setting 'log_format' must be one of default, ISO8601, got 1"),
    ({"log_file": "/tmp/triton.log"}, "log setting 'log_file' ('/tmp/triton.log') is not supported: this server "
                                      "logs to its standard output and error; to log to a file, start it with "
                                      "--log_config_file"),
    ({"log_file": 7}, "log setting 'log_file' must be a string, got 7"),
    ([{"log_info": True}], 'the log settings must be a JSON object, such as {"log_verbose_level": 1}'),
    ("log_info", 'the log settings must be a JSON object, such as {"log_verbose_level": 1}'),
]


@pytest.mark.parametrize("doc,message", BAD_SETTINGS, ids=[json.dumps(d) for d, _ in BAD_SETTINGS])
def test_bad_settings_are_400_naming_them_and_change_nothing(fresh, doc, message):
    if isinstance(doc, dict):
        doc = {"log_verbose_level": 1, **doc}  # a good setting beside the bad one is not applied either
    status, headers, body = post_json(fresh.http_port, "/v2/logging", doc)
    assert status == 400 and message in body["error"], body
    assert headers["x-request-id"]
    assert json.loads(request(fresh.http_port, "GET", "/v2/logging")[2]) == DEFAULTS


@pytest.mark.parametrize("body,message", [
    (b"", 'POST /v2/logging takes the settings to change as a JSON object, such as {"log_verbose_level": 1}'),
    (b'{"log_info": tru', "Unrecognized request format"),
])
def test_an_empty_or_broken_body_is_400(fresh, body, message):
    status, _, answer = request(fresh.http_port, "POST", "/v2/logging", body, {"Content-Type": "application/json"})
    assert status == 400 and message in json.loads(answer)["error"], answer


def test_tritonclient_http_reports_the_400(fresh):
    with pytest.raises(InferenceServerException) as info:
        http_client(fresh).update_log_settings({"log_file": "/var/log/x.log"})
    assert "log setting 'log_file' ('/var/log/x.log') is not supported" in info.value.message()
    assert info.value.status() == "400"


def _grpc_settings(**values):
    """A LogSettingsRequest whose values are (field, value) pairs: log_info=("uint32_param", 1)."""
    message = pb.LogSettingsRequest()
    for key, (field, value) in values.items():
        setattr(message.settings[key], field, value)
    return message


@pytest.mark.parametrize("values,message", [
    ({"log_verbos_level": ("uint32_param", 1)}, "unknown log setting 'log_verbos_level'"),
    ({"log_info": ("uint32_param", 1)}, "log setting 'log_info' must be true or false, got 1"),
    ({"log_info": ("string_param", "true")}, "log setting 'log_info' must be true or false, got 'true'"),
    ({"log_verbose_level": ("bool_param", True)}, "log setting 'log_verbose_level' must be an integer from 0 to "
                                                 "4294967295, got True"),
    ({"log_verbose_level": ("string_param", "2")}, "got '2'"),
    ({"log_format": ("string_param", "iso")}, "log setting 'log_format' must be one of default, ISO8601, got 'iso'"),
    ({"log_format": ("bool_param", False)}, "log setting 'log_format' must be one of default, ISO8601, got False"),
    ({"log_file": ("string_param", "/tmp/x.log")}, "log setting 'log_file' ('/tmp/x.log') is not supported"),
    ({"log_file": ("bool_param", True)}, "log setting 'log_file' must be a string, got True"),
])
def test_bad_settings_over_grpc_are_invalid_argument_naming_them(fresh, stub, values, message):
    with pytest.raises(grpc.RpcError) as info:
        stub.LogSettings(_grpc_settings(**{"log_warning": ("bool_param", False), **values}), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in info.value.details()
    assert dict(info.value.trailing_metadata())["x-request-id"]
    assert http_client(fresh).get_log_settings() == DEFAULTS


def test_tritonclient_grpc_reports_invalid_argument(fresh):
    with pytest.raises(InferenceServerException) as info:
        tgrpc.InferenceServerClient(fresh.grpc_url).update_log_settings({"log_level": True})
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unknown log setting 'log_level'" in info.value.message()


# --- model configuration ------------------------------------------------------------------------------
BATCHED = {"name": "batched", "platform": "kserve_sdk", "backend": "kserve_sdk", "max_batch_size": 8,
           "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
           "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
           "dynamic_batching": {"max_queue_delay_microseconds": 5000}}
PLAIN = {"name": "plain", "platform": "kserve_sdk", "backend": "kserve_sdk", "max_batch_size": 0,
         "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [-1]}],
         "output": [{"name": "IDS", "data_type": "TYPE_INT64", "dims": [-1, 2]}]}


@pytest.mark.parametrize("version", ["", "1"])
def test_model_config_over_http(server, version):
    client = http_client(server)
    assert client.get_model_config("batched", version) == BATCHED  # batch dim left out, flags' batching
    assert client.get_model_config("plain", version) == PLAIN
    path = "/v2/models/plain" + (f"/versions/{version}" if version else "") + "/config"
    status, headers, body = request(server.http_port, "GET", path)
    assert status == 200 and headers["content-type"] == "application/json" and json.loads(body) == PLAIN


@pytest.mark.parametrize("version", ["", "1"])
def test_model_config_over_grpc(server, version):
    client = tgrpc.InferenceServerClient(server.grpc_url)
    config = client.get_model_config("batched", version).config
    assert (config.name, config.platform, config.backend, config.max_batch_size) == (
        "batched", "kserve_sdk", "kserve_sdk", 8)
    assert config.dynamic_batching.max_queue_delay_microseconds == 5000
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("INPUT0", tgrpc.model_config_pb2.TYPE_FP32, [4])]
    as_json = client.get_model_config("plain", version, as_json=True)["config"]
    assert as_json["input"] == [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": ["-1"]}]  # int64 as text
    assert as_json["output"] == [{"name": "IDS", "data_type": "TYPE_INT64", "dims": ["-1", "2"]}]
    assert "dynamic_batching" not in as_json and as_json["name"] == "plain"


def test_unknown_model_config_is_404_and_not_found(server, stub):
    status, _, body = request(server.http_port, "GET", "/v2/models/nope/config")
    assert status == 404 and "nope" in json.loads(body)["error"], body
    with pytest.raises(InferenceServerException) as info:
        http_client(server).get_model_config("nope", "2")
    assert info.value.status() == "404" and "nope" in info.value.message()
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelConfig(pb.ModelConfigRequest(name="nope"), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND and "nope" in info.value.details()


def test_a_model_describing_its_tensors_wrongly_is_its_own_500(server, stub):
    status, _, body = request(server.http_port, "GET", "/v2/models/odd/config")
    assert status == 500, body
    assert json.loads(body)["error"] == ("model 'odd' describes an input as 'INPUT0': get_input_types() must return "
                                         "dicts with name, datatype and shape")
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelConfig(pb.ModelConfigRequest(name="odd"), timeout=10)
    assert info.value.code() == grpc.StatusCode.INTERNAL and "model 'odd' describes an input" in info.value.details()
    assert http_client(server).is_server_live()


# --- --workers 2 --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def workers(start_server):
    return start_server(SCRIPT, "--workers", "2")


def worker_pids(server, count: int = 2, timeout: float = 30.0):
    """The pids of the workers the parent has started (it logs each start), the newest ``count``."""
    def enough() -> List[int]:
        found = [int(p) for p in re.findall(r"Started \d+ workers: \[([\d, ]+)\]", server.log())
                 for p in p.split(",")]
        found += [int(p) for p in re.findall(r"(\d+) kserve INFO \[.*\] Serving HTTP", server.log())]
        live = sorted({p for p in found if _alive(p)})
        return live if len(live) >= count else []

    return eventually(enough, timeout, interval=0.1, message=lambda: f"no {count} workers in the log:\n{server.log()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def applied_by(server, mark: int, text: str):
    """The pids that logged ``log settings now`` with ``text`` since ``mark``."""
    return {int(pid) for pid, line in re.findall(r"\S+ (\d+) kserve INFO (.*log settings now.*)",
                                                  log_after(server, mark)) if text in line}


def test_a_change_reaches_every_worker_before_the_answer(workers):
    pids = worker_pids(workers)
    mark = len(workers.log())
    answer = http_client(workers).update_log_settings({"log_verbose_level": 1})
    assert answer["log_verbose_level"] == 1
    # the worker that took the POST answers once every worker has applied it, and each logs that it did
    assert applied_by(workers, mark, "'log_verbose_level': 1") == set(pids), log_after(workers, mark)
    for _ in range(6):  # whichever worker answers, the setting is in force there
        assert json.loads(request(workers.http_port, "GET", "/v2/logging")[2])["log_verbose_level"] == 1
        pid = predict(workers)
        assert pid in pids and f"predict-debug of plain in {pid}" in workers.log()
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(workers.grpc_url))
    mark = len(workers.log())
    answer = stub.LogSettings(_grpc_settings(log_verbose_level=("uint32_param", 0)), timeout=10)
    assert answer.settings["log_verbose_level"].uint32_param == 0
    assert applied_by(workers, mark, "'log_verbose_level': 0") == set(pids), log_after(workers, mark)


def test_a_replaced_worker_takes_the_settings_in_force(workers):
    client = http_client(workers)
    client.update_log_settings({"log_format": "ISO8601"})
    old = worker_pids(workers)
    mark = len(workers.log())
    os.kill(old[0], signal.SIGKILL)
    new = eventually(lambda: applied_by(workers, mark, "'log_format': 'ISO8601'") - set(old), timeout=30,
                     interval=0.1, message=lambda: log_after(workers, mark))
    assert len(new) == 1, log_after(workers, mark)  # it replayed the change at start
    client.update_log_settings({"log_format": "default"})


# --- a log config of one's own ------------------------------------------------------------------------
def test_settings_back_as_at_start_up_give_each_logger_its_own_level_again(start_server, tmp_path):
    """A log config that silences the access lines: changing log_format alone keeps them off, and so do
    verbose level 1 and back, since each logger gets its own start-up level again."""
    config = {"version": 1, "disable_existing_loggers": False,
              "formatters": {"plain": {"()": "kserve_sdk.logging.Formatter",
                                       "fmt": "%(asctime)s %(name)s %(message)s"}},
              "handlers": {"out": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stdout"}},
              "loggers": {name: {"handlers": ["out"], "level": level, "propagate": False} for name, level in
                          [("kserve", "INFO"), ("kserve.trace", "INFO"), ("tornado.access", "WARNING")]}}
    path = tmp_path / "log_config.json"
    path.write_text(json.dumps(config))
    server = start_server(SCRIPT, "--log_config_file", str(path))
    client = http_client(server)
    for change in ({"log_format": "ISO8601"}, {"log_verbose_level": 1}, {"log_verbose_level": 0}):
        client.update_log_settings(change)
        mark = len(server.log())
        predict_logged(server)
        lines = log_after(server, mark, "kserve.trace")
        assert "kserve.trace" in lines and ("predict-debug" in lines) == (change.get("log_verbose_level") == 1)
        assert ("tornado.access" in lines) == (change.get("log_verbose_level") == 1), (change, lines)
    assert re.search(r"\d\d:\d\d\.\d{3}Z kserve predict-info", lines), lines  # ISO 8601 in the config's format


def test_the_settings_at_start_up_say_what_kserve_loglevel_set(start_server):
    server = start_server(SCRIPT, env={"KSERVE_LOGLEVEL": "WARNING"}, grpc=False)
    client = http_client(server)
    assert client.get_log_settings() == {**DEFAULTS, "log_info": False}
    mark = len(server.log())
    pid = predict(server)
    lines = log_after(server, mark)
    assert f"predict-warning of plain in {pid}" in lines and "predict-info" not in lines
    assert client.update_log_settings({"log_info": True})["log_info"] is True
    mark = len(server.log())
    pid = predict(server)
    assert f"predict-info of plain in {pid}" in log_after(server, mark)
    assert client.update_log_settings({"log_info": None})["log_info"] is False  # back to WARNING
