"""``GET /openapi.json`` (always) and, with ``--enable_docs_url true``, a Swagger UI page at ``/docs``.

The OpenAPI document is ``protocol/rest_v1.yaml`` and ``protocol/rest_v2.yaml`` merged into one, read once at
first use and kept as JSON bytes. The Swagger UI scripts and styles come from the ``swagger-ui-bundle``
package (the ``docs`` extra) and are served by this server under ``/docs/static/``: the page loads nothing
from any other host, so it works without network access.
"""
import copy
import json
import os
import sys
import threading
import uuid
from typing import Any, Dict, List, Optional, Tuple, Type

from tornado.web import RequestHandler, StaticFileHandler

from ..errors import PermissionDenied
from ..logging import logger
from .api import Options, RestAPI
from .base import JSON, BaseHandler

#: Where the two OpenAPI documents live: ``protocol/`` of a checkout (or editable install), else the copy
#: a wheel installs under ``<prefix>/share/kserve-sdk/protocol`` (setup.cfg's data_files).
_CHECKOUT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "protocol")
PROTOCOL_DIR = next((d for d in (_CHECKOUT_DIR, os.path.join(sys.prefix, "share", "kserve-sdk", "protocol"))
                     if os.path.isfile(os.path.join(d, "rest_v2.yaml"))), _CHECKOUT_DIR)
DOCUMENTS = ("rest_v1.yaml", "rest_v2.yaml")

TITLE = "kserve_sdk REST API: KServe v1 and Open Inference Protocol v2"

_lock = threading.Lock()
_document: Optional[Dict[str, Any]] = None
_document_json: Optional[bytes] = None


def _merge_named(into: Dict[str, Any], new: Dict[str, Any], where: str) -> None:
    """Add ``new``'s entries to ``into``; a name both define must mean the same thing in both."""
    for name, value in new.items():
        if name in into and into[name] != value:
            raise ValueError(f"the OpenAPI documents define {where}/{name} differently")
        into[name] = value


def merge_documents(documents: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One OpenAPI 3 document with the paths, components and tags of ``documents``."""
    from ..dataplane import SERVER_VERSION

    merged: Dict[str, Any] = {
        "openapi": documents[0]["openapi"],
        "info": {
            "title": TITLE,
            "version": SERVER_VERSION,
            "description": "\n\n".join(f"**{doc['info']['title']}**: {doc['info'].get('description', '').strip()}"
                                       for doc in documents),
        },
        "tags": [],
        "paths": {},
        "components": {},
    }
    tag_names = set()
    for doc in documents:
        if not doc.get("openapi", "").startswith("3."):
            raise ValueError(f"not an OpenAPI 3 document: {doc.get('info', {}).get('title')}")
        for tag in doc.get("tags", []):
            if tag["name"] not in tag_names:
                tag_names.add(tag["name"])
                merged["tags"].append(tag)
        _merge_named(merged["paths"], doc.get("paths", {}), "paths")
        for section, entries in doc.get("components", {}).items():
            _merge_named(merged["components"].setdefault(section, {}), entries, f"components/{section}")
    return merged


def openapi_document() -> Dict[str, Any]:
    """The merged OpenAPI document (a deep copy: callers may change it)."""
    _load()
    return copy.deepcopy(_document)


def openapi_json() -> bytes:
    """The merged OpenAPI document as JSON bytes, loaded and encoded once."""
    return _load()


def _load() -> bytes:
    global _document, _document_json
    if _document_json is None:
        with _lock:
            if _document_json is None:
                import yaml

                documents = []
                for name in DOCUMENTS:
                    with open(os.path.join(PROTOCOL_DIR, name), encoding="utf-8") as f:
                        documents.append(yaml.safe_load(f))
                document = merge_documents(documents)
                # YAML anchors give shared sub-objects; JSON writes each use out in full.
                _document_json = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
                _document = json.loads(_document_json)
    return _document_json


class OpenAPIHandler(BaseHandler):
    """``GET /openapi.json``: the merged OpenAPI document."""

    endpoint = "openapi"

    def get(self) -> None:
        self.set_header("Cache-Control", "no-cache")
        self.send_body(openapi_json(), JSON)


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="stylesheet" href="{static}swagger-ui.css">
<link rel="icon" type="image/png" href="{static}favicon-32x32.png">
<style>body {{ margin: 0; }}</style>
</head>
<body>
<div id="swagger-ui"></div>
<script src="{static}swagger-ui-bundle.js"></script>
<script>
window.ui = SwaggerUIBundle({{
  url: "{spec}",
  dom_id: "#swagger-ui",
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
  deepLinking: true,
  validatorUrl: null
}});
</script>
</body>
</html>
"""


class DocsHandler(BaseHandler):
    """``GET /docs``: the Swagger UI page. Its links are relative, so it also works behind a path prefix."""

    endpoint = "docs"

    def get(self) -> None:
        if self.request.path.endswith("/"):
            static, spec = "static/", "../openapi.json"
        else:
            static, spec = "docs/static/", "openapi.json"
        self.send_body(_PAGE.format(title=TITLE, static=static, spec=spec).encode("utf-8"),
                       "text/html; charset=utf-8")


class DocsStaticHandler(StaticFileHandler):
    """``GET /docs/static/<file>``: Swagger UI's files, from the ``swagger-ui-bundle`` package."""

    assets_dir = ""
    protocol, endpoint = "rest_v2", "docs"  # metric and access-log labels, as BaseHandler's

    def initialize(self, dataplane: Any = None) -> None:  # takes the route table's shared arguments
        super().initialize(path=self.assets_dir)

    def prepare(self) -> None:
        """Refuse, as every other docs route does, when the ``docs`` group is restricted (docs/security.md)."""
        access_check = self.settings.get("access_check")
        if access_check is None:
            return
        try:
            access_check(self)
        except PermissionDenied as e:
            self.set_status(int(e.http_status))
            self.set_header("x-request-id", uuid.uuid4().hex)  # a static file's answer has no call to mint one
            self.finish({"error": str(e)})


def swagger_ui_assets() -> Optional[str]:
    """The folder of Swagger UI's dist files, or None (logged) when ``swagger-ui-bundle`` is missing."""
    try:
        import swagger_ui_bundle
    except ImportError as e:
        logger.error("--enable_docs_url is true but the Swagger UI files are missing (%s): install the "
                     "'swagger-ui-bundle' package (pip install 'kserve-sdk[docs]'); /docs is not served", e)
        return None
    folder = str(getattr(swagger_ui_bundle, "swagger_ui_path", ""))
    if not folder or not os.path.isfile(os.path.join(folder, "swagger-ui-bundle.js")):
        logger.error("--enable_docs_url is true but swagger-ui-bundle has no swagger-ui-bundle.js (looked in %r); "
                     "/docs is not served", folder)
        return None
    return folder


def docs_routes(enabled: bool) -> List[Tuple[str, Type[RequestHandler]]]:
    """The ``/docs`` routes when ``enabled`` and Swagger UI's files are installed, else none (so 404)."""
    if not enabled:
        return []
    folder = swagger_ui_assets()
    if folder is None:
        return []
    static = type("DocsStatic", (DocsStaticHandler,), {"assets_dir": folder})
    return [
        (r"/docs/?", DocsHandler),
        (r"/docs/static/([\w.-]+\.(?:css|js|png|map))", static),
    ]


def routes(options: Options) -> List[Tuple[str, Type[RequestHandler]]]:
    """``/openapi.json``, and the ``/docs`` routes with ``--enable_docs_url true``."""
    return [(r"/openapi\.json", OpenAPIHandler), *docs_routes(options.enable_docs_url)]


#: The OpenAPI document and Swagger UI.
API = RestAPI("docs", routes)
