"""The jobs runner's rules, in process: which callback URLs a job may name, when a reply completes or fails a
job (the error message it keeps, the result-size limit), and the checks of the --jobs_store and --job_* flags."""
import json

import pytest

from kserve_sdk.jobs.replay import reply_error, route_of
from kserve_sdk.jobs.runner import outcome
from kserve_sdk.jobs.service import JobOptions, callback_refusal
from kserve_sdk.jobs.store import COMPLETED, FAILED, JobRequest, StoredReply
from kserve_sdk.model_server import job_options, parser

HOSTS = frozenset({"hooks.example.com", "127.0.0.1:8080", "[::1]:9000"})


@pytest.mark.parametrize("url", [
    "http://hooks.example.com/done",
    "https://hooks.example.com:8443/done?job=1",  # a host listed without a port: any port
    "http://HOOKS.example.com/done",  # host names are case-insensitive
    "http://127.0.0.1:8080/",
    "http://[::1]:9000/x",
])
def test_a_callback_to_an_allowed_host_is_allowed(url):
    assert callback_refusal(url, HOSTS) is None


@pytest.mark.parametrize("url, says", [
    ("ftp://hooks.example.com/done", "must be an http:// or https:// URL"),
    ("file:///etc/passwd", "must be an http:// or https:// URL"),
    ("hooks.example.com/done", "must be an http:// or https:// URL"),
    ("http://127.0.0.1:8081/", "127.0.0.1:8081 is not among the hosts this server may call back"),
    ("http://127.0.0.1/", "127.0.0.1:80 is not among the hosts"),  # the scheme's port is not the listed one
    ("http://169.254.169.254/latest/meta-data", "169.254.169.254:80 is not among the hosts"),
    ("http://evil.example.com/", "evil.example.com:80 is not among the hosts"),
    ("http://user:pw@hooks.example.com/", "must name a host (and no user or password)"),
    ("http:///nohost", "must name a host"),
    ("http://hooks.example.com:99999/", "is not a URL"),
])
def test_a_callback_elsewhere_is_refused_with_the_reason(url, says):
    refusal = callback_refusal(url, HOSTS)
    assert refusal is not None and says in refusal, refusal
    assert repr(url) in refusal


def test_with_no_callback_hosts_every_callback_is_refused_naming_the_flag():
    refusal = callback_refusal("http://127.0.0.1:8080/", frozenset())
    assert refusal is not None and "allows no callbacks" in refusal and "--job_callback_hosts" in refusal


def _reply(status: int, body: bytes, content_type: str = "application/json") -> StoredReply:
    return StoredReply(status, {"content-type": content_type}, body)


def test_a_reply_below_400_completes_the_job_and_is_kept_as_it_is():
    reply = _reply(200, b'{"outputs": []}')
    assert outcome(reply, 1024) == (COMPLETED, reply, None)


def test_an_error_reply_fails_the_job_with_its_message_and_is_kept():
    reply = _reply(500, json.dumps({"error": "ValueError : bad row 3"}).encode())
    assert outcome(reply, 1024) == (FAILED, reply, "ValueError : bad row 3")


def test_a_reply_over_the_result_limit_fails_the_job_naming_the_limit():
    status, kept, error = outcome(_reply(200, b"x" * 101), 100)
    assert status == FAILED
    assert error == ("the job's result is 101 bytes, more than the server keeps (--max_job_result_bytes 100); "
                     "it was not stored")
    assert kept.status == 500 and kept.headers == {"content-type": "application/json"}
    assert json.loads(kept.body) == {"error": error}


def test_a_reply_of_exactly_the_limit_is_kept_and_0_means_no_limit():
    exact = _reply(200, b"x" * 100)
    assert outcome(exact, 100) == (COMPLETED, exact, None)
    huge = _reply(200, b"x" * 1_000_000)
    assert outcome(huge, 0) == (COMPLETED, huge, None)


@pytest.mark.parametrize("reply, message", [
    (_reply(404, b'{"error": "Model with name missing does not exist."}'), "Model with name missing does not exist."),
    (_reply(400, b'{"error": {"message": "bad prompt", "type": "invalid_request_error"}}'), "bad prompt"),
    (_reply(502, b"upstream went away", "text/plain"), "answered 502: upstream went away"),
    (_reply(503, b""), "answered 503"),
    (_reply(500, b'{"detail": "no error field"}'), 'answered 500: {"detail": "no error field"}'),
    (_reply(500, b"\xff\xfe not utf-8", "application/octet-stream"), "answered 500: \ufffd\ufffd not utf-8"),
])
def test_the_error_message_of_a_failed_reply(reply, message):
    assert reply_error(reply) == message


def test_a_long_non_json_error_body_is_cut_in_the_message():
    message = reply_error(_reply(500, b"y" * 5000, "text/plain"))
    assert message == "answered 500: " + "y" * 200


def test_a_reply_that_did_not_fail_has_no_error_message():
    assert reply_error(_reply(200, b'{"error": "looks like one"}')) is None
    assert reply_error(_reply(302, b"")) is None


def test_a_job_names_the_route_it_replays():
    assert route_of(JobRequest("v1", "m", None, {}, b"")) == "POST /v1/models/m:predict"
    assert route_of(JobRequest("v2", "m", None, {}, b"")) == "POST /v2/models/m/infer"
    assert route_of(JobRequest("v2", "m", "3", {}, b"")) == "POST /v2/models/m/versions/3/infer"


# --- the flags --------------------------------------------------------------------------------------------
def _options(*argv: str) -> JobOptions:
    return job_options(parser.parse_known_args(list(argv))[0])


def test_the_default_options_keep_jobs_in_a_sqlite_file_of_the_working_directory():
    options = _options()
    assert options == JobOptions("sqlite:///kserve-jobs.sqlite3", 30.0, 3, 100_000, 64 * 1024 * 1024, 86_400.0,
                                 frozenset(), 4)
    options.check()


def test_the_flags_make_the_options():
    options = _options("--jobs_store", "redis://127.0.0.1:6399/2", "--job_lease_seconds", "2.5",
                       "--job_max_attempts", "5", "--max_pending_jobs", "0", "--max_job_result_bytes", "10",
                       "--job_retention_seconds", "0.5", "--job_callback_hosts", " Hooks.example.com , 127.0.0.1:80,",
                       "--job_concurrency", "16")
    assert options == JobOptions("redis://127.0.0.1:6399/2", 2.5, 5, 0, 10, 0.5,
                                 frozenset({"hooks.example.com", "127.0.0.1:80"}), 16)
    options.check()


@pytest.mark.parametrize("store", ["none", "NONE", ""])
def test_jobs_store_none_turns_jobs_off(store):
    assert _options("--jobs_store", store).store_url is None
    _options("--jobs_store", store).check()


@pytest.mark.parametrize("field, bad, message", [
    ("store_url", "postgres://db/jobs", "--jobs_store 'postgres://db/jobs': use sqlite:///path/to/file, "
                                        "redis://host:port/db, or none"),
    ("store_url", "sqlite:///", "--jobs_store 'sqlite:///': name the SQLite file"),
    ("store_url", "sqlite:////no/such/folder/jobs.sqlite3", "the folder /no/such/folder does not exist"),
    ("lease_seconds", 0.0, "--job_lease_seconds must be more than 0, got 0.0"),
    ("lease_seconds", -1.0, "--job_lease_seconds must be more than 0, got -1.0"),
    ("max_attempts", 0, "--job_max_attempts must be 1 or more, got 0"),
    ("max_pending", -1, "--max_pending_jobs must be 0 or more, got -1"),
    ("max_result_bytes", -5, "--max_job_result_bytes must be 0 or more, got -5"),
    ("retention_seconds", -0.5, "--job_retention_seconds must be 0 or more, got -0.5"),
    ("concurrency", 0, "--job_concurrency must be 1 or more, got 0"),
    ("callback_hosts", frozenset({"http://hooks.example.com"}), "--job_callback_hosts: 'http://hooks.example.com' "
                                                                "is not a host or host:port"),
    ("callback_hosts", frozenset({"hooks.example.com:http"}), "'hooks.example.com:http' is not a host or host:port"),
    ("callback_hosts", frozenset({"hooks.example.com/path"}), "'hooks.example.com/path' is not a host or host:port"),
])
def test_options_that_cannot_work_are_refused_naming_the_flag(field, bad, message):
    options = JobOptions(**{field: bad})
    with pytest.raises(ValueError) as info:
        options.check()
    assert message in str(info.value)
