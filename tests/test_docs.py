"""``GET /openapi.json`` and ``--enable_docs_url``'s Swagger UI at ``/docs``.

The merged document must be valid OpenAPI 3, cover every route of the server's route table, and describe
what the server really answers (live responses are validated against the documented schemas). Swagger UI
must render in a headless Chromium that can reach nothing but the loopback address.
"""
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
from typing import Any, Dict, Iterator, List, Set, Tuple

import pytest
from openapi_spec_validator import validate as validate_spec
from tornado.web import RequestHandler, StaticFileHandler

from helpers import ROOT, check_request, check_response, inline, media_type, request
from kserve_sdk.dataplane import DataPlane
from kserve_sdk.handlers import http as http_routes
from kserve_sdk.handlers.api import MODEL, VERSION
from kserve_sdk.handlers.docs import openapi_document
from kserve_sdk.model_repository import ModelRepository
from kserve_sdk.model_server import REST_APIS
from kserve_sdk.triton.api import REGION

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
METHODS = ("get", "post", "put", "patch", "delete", "head", "options")
INFER_PATH = "/v2/models/{model_name}/infer"
TITLE_TEXT = "kserve_sdk REST API"

# The document as this checkout's YAML files give it (the live one must be the same).
DOCUMENT = openapi_document()


# --- reading the route table ---------------------------------------------------------------------------
def _expand(pattern: str) -> List[str]:
    """The OpenAPI paths a route regex of kserve_sdk/handlers/http.py stands for."""
    pattern = pattern[:-1] if pattern.endswith("$") else pattern
    paths, i = [""], 0
    while i < len(pattern):
        rest = pattern[i:]
        alternation = re.match(r"\((\w+(?:\|\w+)*)\)", rest)
        named = re.match(r"\(\?P<(\w+)>\[\^/\]\+\)", rest)  # a named segment: the parameter of that name
        if rest.startswith(VERSION):
            options, i = ["", "/versions/{model_version}"], i + len(VERSION)
        elif rest.startswith(MODEL):
            options, i = ["{model_name}"], i + len(MODEL)
        elif rest.startswith(REGION):
            options, i = ["{region_name}"], i + len(REGION)
        elif named:
            options, i = ["{" + named.group(1) + "}"], i + named.end()
        elif alternation:
            options, i = alternation.group(1).split("|"), i + alternation.end()
        elif rest == "/?":  # an optional trailing slash
            options, i = [""], i + 2
        elif rest[0] == "\\":
            options, i = [rest[1]], i + 2
        elif rest[0] in ".^$*+?()[]{}|":
            raise AssertionError(f"test_docs cannot read the route regex {pattern!r} (at {rest!r})")
        else:
            options, i = [rest[0]], i + 1
        paths = [p + o for p in paths for o in options]
    return paths


def _methods(handler: type) -> Set[str]:
    return {m for m in METHODS if getattr(handler, m, None) is not getattr(RequestHandler, m)}


def route_table() -> Iterator[Tuple[str, str, type]]:
    """(OpenAPI path, method, handler) for every route, with the docs routes on (Swagger UI's files left out)."""
    app = http_routes.make_app(DataPlane(ModelRepository()), REST_APIS, enable_docs_url=True)
    rules = app.wildcard_router.rules
    assert len(rules) > 10
    for rule in rules:
        handler = rule.target
        if isinstance(handler, type) and issubclass(handler, StaticFileHandler):
            continue
        methods = _methods(handler)
        if not methods:  # a catch-all that only answers 404 (the OpenAI prefix's unknown paths): nothing to document
            continue
        for path in _expand(rule.matcher.regex.pattern):
            for method in methods:
                yield path, method, handler


# --- validating against the document (check_request and check_response, in tests/helpers.py) ---------------
UNKNOWN_JOB = "0" * 32  # a well-formed job id no job has


def fill(path: str, model: str = "echo", version: str = "1") -> str:
    return path.replace("{model_name}", model).replace("{model_version}", version).replace("{job_id}", UNKNOWN_JOB)


# --- (a) the document ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def live_document(zoo) -> Dict[str, Any]:
    status, headers, body = request(zoo.http_port, "GET", "/openapi.json")
    assert status == 200, body
    assert media_type(headers) == "application/json"
    return json.loads(body)


def test_openapi_json_is_valid_openapi_3_merging_v1_and_v2(live_document):
    import yaml

    validate_spec(live_document)
    assert live_document["openapi"].startswith("3.0")
    assert live_document == DOCUMENT
    paths = set()
    for name in ("rest_v1.yaml", "rest_v2.yaml"):
        with open(os.path.join(ROOT, "protocol", name)) as f:
            paths |= set(yaml.safe_load(f)["paths"])
    assert set(live_document["paths"]) == paths
    # the routes being added alongside, documented ahead of or with them
    for path, method in [("/metrics", "get"), ("/openapi.json", "get"), ("/docs", "get"),
                         ("/v2/repository/index", "get"), ("/v2/repository/index", "post"),
                         ("/v2/models/{model_name}/infer_stream", "post"),
                         ("/v2/models/{model_name}/versions/{model_version}/generate", "post"),
                         ("/v2/models/{model_name}/generate_stream", "post")]:
        assert method in live_document["paths"][path], (method, path)
    for path in ("/v2/models/{model_name}/infer_stream", "/v2/models/{model_name}/generate_stream"):
        assert "text/event-stream" in inline(live_document, live_document["paths"][path]["post"]["responses"]["200"])[
            "content"]


def test_every_route_in_the_route_table_is_documented(live_document):
    missing = sorted({f"{method.upper()} {path} ({handler.__name__})" for path, method, handler in route_table()
                      if method not in live_document["paths"].get(path, {})})
    assert not missing, "routes missing from protocol/rest_v*.yaml:\n" + "\n".join(missing)


def test_the_document_is_json_bytes_cached_once(zoo):
    first = request(zoo.http_port, "GET", "/openapi.json")[2]
    assert request(zoo.http_port, "GET", "/openapi.json")[2] == first


# --- (b) live answers fit the document -----------------------------------------------------------------
SERVED = {(path, method) for path, method, _ in route_table()}
GET_PATHS = sorted(path for path, item in DOCUMENT["paths"].items() if "get" in item)


@pytest.mark.parametrize("path", GET_PATHS)
def test_documented_get_route_answers_as_documented(zoo, live_document, path):
    if (path, "get") not in SERVED:
        pytest.skip(f"GET {path} is documented but not in the route table yet")
    status, headers, body = request(zoo.http_port, "GET", fill(path))
    # /docs and shared memory are off on the zoo server (no --enable_docs_url, --allow_client_shm): documented
    # 404 and 403
    # and no OpenAI model: its routes answer 404
    # and no job: a job's routes answer 404 for the id
    assert status == (404 if path == "/docs" or path.startswith("/openai/") or "{job_id}" in path
                      else 403 if "sharedmemory" in path else 200), body[:300]
    check_response(live_document, path, "get", status, headers, body)


@pytest.mark.parametrize("path,url,status", [
    ("/v2/models/{model_name}", "/v2/models/nope", 404),
    ("/v2/models/{model_name}/ready", "/v2/models/nope/ready", 404),
    ("/v2/models/{model_name}/versions/{model_version}/ready", "/v2/models/nope/versions/1/ready", 404),
    ("/v1/models/{model_name}", "/v1/models/nope", 404),
])
def test_get_errors_answer_as_documented(zoo, live_document, path, url, status):
    got, headers, body = request(zoo.http_port, "GET", url)
    assert got == status, body
    check_response(live_document, path, "get", got, headers, body)


def _v2_request(datatype: str = "FP32", binary_output: bool = False) -> Dict[str, Any]:
    doc: Dict[str, Any] = {"id": "doc-1", "inputs": [
        {"name": "INPUT0", "shape": [1, 4], "datatype": datatype, "data": [1.0, 2.0, 3.0, 4.0]}]}
    if binary_output:
        doc["parameters"] = {"binary_data_output": True}
    return doc


POSTS = [
    # (id, documented path, URL, JSON body (dict) or raw bytes, status)
    ("v2-infer", INFER_PATH, "/v2/models/echo/infer", _v2_request(), 200),
    ("v2-infer-version", "/v2/models/{model_name}/versions/{model_version}/infer",
     "/v2/models/echo/versions/1/infer", _v2_request(), 200),
    ("v2-infer-binary-out", INFER_PATH, "/v2/models/echo/infer", _v2_request(binary_output=True), 200),
    ("v2-infer-malformed", INFER_PATH, "/v2/models/echo/infer", b'{"inputs": [', 400),
    ("v2-infer-bad-datatype", INFER_PATH, "/v2/models/echo/infer", b'{"inputs": [{"name": "INPUT0", '
     b'"shape": [1, 4], "datatype": "FP33", "data": [1, 2, 3, 4]}]}', 400),
    ("v2-infer-unknown-model", INFER_PATH, "/v2/models/nope/infer", _v2_request(), 404),
    ("v1-predict", "/v1/models/{model_name}:predict", "/v1/models/echo:predict", {"instances": [[1, 2, 3, 4]]}, 200),
    ("v1-predict-bytes", "/v1/models/{model_name}:predict", "/v1/models/raw:predict", {"instances": ["bytes"]}, 200),
    ("v1-explain", "/v1/models/{model_name}:explain", "/v1/models/explained:explain", {"instances": [[1, 3]]}, 200),
    ("v1-predict-malformed", "/v1/models/{model_name}:predict", "/v1/models/echo:predict", b"{nope", 400),
    ("v1-predict-invalid", "/v1/models/{model_name}:predict", "/v1/models/failing:predict",
     {"instances": ["invalid"]}, 400),
    ("v1-predict-unknown-model", "/v1/models/{model_name}:predict", "/v1/models/nope:predict",
     {"instances": [1]}, 404),
    ("v1-predict-not-implemented", "/v1/models/{model_name}:predict", "/v1/models/failing:predict",
     {"instances": ["notimpl"]}, 501),
    ("v1-predict-model-error", "/v1/models/{model_name}:predict", "/v1/models/failing:predict",
     {"instances": ["boom"]}, 500),
]


# the streaming and generate routes, on a model that does not stream (one response)
STREAM = "/v2/models/{model_name}/infer_stream"
GENERATE = "/v2/models/{model_name}/generate"
GENERATE_STREAM = "/v2/models/{model_name}/generate_stream"
POSTS += [
    ("infer-stream", STREAM, "/v2/models/echo/infer_stream", _v2_request(), 200),
    ("infer-stream-version", "/v2/models/{model_name}/versions/{model_version}/infer_stream",
     "/v2/models/echo/versions/1/infer_stream", _v2_request(), 200),
    ("infer-stream-malformed", STREAM, "/v2/models/echo/infer_stream", b'{"inputs": [', 400),
    ("infer-stream-unknown-model", STREAM, "/v2/models/nope/infer_stream", _v2_request(), 404),
    ("generate-tensors", GENERATE, "/v2/models/echo/generate", _v2_request(), 200),
    ("generate-unknown-model", GENERATE, "/v2/models/nope/generate", {"text_input": "hi"}, 404),
    ("generate-stream-tensors", GENERATE_STREAM, "/v2/models/echo/generate_stream", _v2_request(), 200),
    ("generate-stream-malformed", GENERATE_STREAM, "/v2/models/echo/generate_stream", b"{nope", 400),
]


@pytest.mark.parametrize("path,url,body,status", [case[1:] for case in POSTS], ids=[case[0] for case in POSTS])
def test_inference_answers_as_documented(zoo, live_document, path, url, body, status):
    if (path, "post") not in SERVED:
        pytest.skip(f"POST {path} is documented but not in the route table yet")
    if isinstance(body, dict):
        body = json.dumps(body).encode()
        check_request(live_document, path, "post", body, "application/json")
    got, headers, answer = request(zoo.http_port, "POST", url, body, {"Content-Type": "application/json"})
    assert got == status, answer[:300]
    check_response(live_document, path, "post", got, headers, answer)


# --- /docs ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def docs_server(start_server):
    return start_server("tests/models/zoo.py", "--enable_docs_url", "true", env={"ZOO_MODELS": "echo"},
                        grpc=False)


def test_docs_is_404_without_the_flag(zoo):
    status, headers, body = request(zoo.http_port, "GET", "/docs")
    assert status == 404 and media_type(headers) == "application/json", body
    assert request(zoo.http_port, "GET", "/docs/static/swagger-ui-bundle.js")[0] == 404


def test_docs_page_and_its_files_are_served_locally(docs_server, live_document):
    status, headers, body = request(docs_server.http_port, "GET", "/docs")
    assert status == 200, body
    check_response(live_document, "/docs", "get", status, headers, body)
    page = body.decode()
    assert "docs/static/swagger-ui-bundle.js" in page and "docs/static/swagger-ui.css" in page
    assert '"openapi.json"' in page
    assert not re.search(r"(https?:)?//[\w.-]+", page), "the page must not load anything from another host"
    slash = request(docs_server.http_port, "GET", "/docs/")[2].decode()
    assert '"static/swagger-ui-bundle.js"' in slash and '"../openapi.json"' in slash
    for name, media in [("swagger-ui-bundle.js", "javascript"), ("swagger-ui.css", "text/css"),
                        ("favicon-32x32.png", "image/png")]:
        status, headers, body = request(docs_server.http_port, "GET", "/docs/static/" + name)
        assert status == 200 and media in headers["content-type"] and len(body) > 500, (name, status, headers)
    for bad in ("/docs/static/../setup.cfg", "/docs/static/%2e%2e/setup.cfg", "/docs/static/index.html",
                "/docs/static/nope.js"):
        assert request(docs_server.http_port, "GET", bad)[0] == 404, bad


def test_docs_without_swagger_ui_bundle_logs_an_error_and_answers_404(start_server, tmp_path):
    hidden = tmp_path / "swagger_ui_bundle"
    hidden.mkdir()
    (hidden / "__init__.py").write_text('raise ImportError("No module named \'swagger_ui_bundle\'")\n')
    server = start_server("tests/models/zoo.py", "--enable_docs_url", "true", grpc=False,
                          env={"ZOO_MODELS": "echo", "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})
    status, headers, body = request(server.http_port, "GET", "/docs")
    assert status == 404 and media_type(headers) == "application/json", body
    assert request(server.http_port, "GET", "/openapi.json")[0] == 200
    assert request(server.http_port, "GET", "/v2/models/echo/ready")[0] == 200
    log = server.log()
    assert "swagger-ui-bundle" in log and "/docs is not served" in log, log


# --- (c) Swagger UI renders in Chromium with no network --------------------------------------------------
def _chromium(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    if not os.path.exists(CHROMIUM):
        message = f"{CHROMIUM} is missing (Debian: apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    profile = tempfile.mkdtemp(prefix="kserve-sdk-chromium-")
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={profile}",
            # no network: every host name but 127.0.0.1 fails to resolve, and every request that is not to the
            # loopback address (bypassed by default) goes to a proxy that is not there
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--proxy-server=http://127.0.0.1:9",
            *args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as timed_out:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(
            f"chromium did not finish in {timeout}s: {err.decode(errors='replace')[-2000:]}") from timed_out
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _png_size(data: bytes) -> Tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_swagger_ui_renders_offline_in_chromium(docs_server, tmp_path):
    url = f"{docs_server.url}/docs"
    dom = _chromium("--virtual-time-budget=5000", "--dump-dom", url)
    html = dom.stdout.decode(errors="replace")
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
    # rendered by Swagger UI's script (the page as served has no operations in it)
    assert 'class="swagger-ui' in html, html[:2000]
    rendered_paths = set(re.findall(r'data-path="([^"]+)"', html))
    assert INFER_PATH in rendered_paths, sorted(rendered_paths)
    assert "/v1/models/{model_name}:predict" in rendered_paths, sorted(rendered_paths)
    assert TITLE_TEXT in html

    png = tmp_path / "docs.png"
    shot = _chromium(f"--screenshot={png}", "--window-size=1280,2000", "--virtual-time-budget=5000",
                     "--hide-scrollbars", url)
    assert png.exists(), shot.stderr.decode(errors="replace")[-2000:]
    data = png.read_bytes()
    assert _png_size(data) == (1280, 2000)
    assert len(data) > 40_000, "the screenshot looks blank"  # a white 1280x2000 page is a few KB
    keep = os.environ.get("DOCS_SCREENSHOT")
    if keep:
        shutil.copyfile(png, keep)

