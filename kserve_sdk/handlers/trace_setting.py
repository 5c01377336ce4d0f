"""Triton's trace extension on both wires: ``GET/POST /v2[/models/<m>]/trace/setting`` and the gRPC
``TraceSetting`` messages. The settings themselves live in kserve_sdk/tracing/settings.py."""
from typing import Any, Dict, Optional

from ..errors import InvalidInput
from ..protocol.rest_codec import loads_json
from .base import BaseHandler


class TraceSettingHandler(BaseHandler):
    """``GET`` the trace settings in force (global, or a model's); ``POST`` a JSON object to change them."""

    endpoint = "trace_setting"

    def get(self, name: Optional[str] = None) -> None:
        self.send_json(self.dataplane.trace_settings(name or ""))

    async def post(self, name: Optional[str] = None) -> None:
        update = loads_json(self.request.body or b"{}")
        self.send_json(await self.dataplane.update_trace_settings(name or "", update))


def update_from_grpc(request: Any) -> Dict[str, Optional[Any]]:
    """A ``TraceSettingRequest``'s settings as the JSON update REST takes: no value clears a setting,
    ``trace_level`` is a list, the others one string each."""
    update: Dict[str, Optional[Any]] = {}
    for name, setting in request.settings.items():
        values = list(setting.value)
        if not values:
            update[name] = None
        elif name == "trace_level":
            update[name] = values
        elif len(values) == 1:
            update[name] = values[0]
        else:
            raise InvalidInput(f"{name} takes one value; got {values!r}")
    return update


def settings_to_grpc(settings: Dict[str, Any], response: Any) -> Any:
    """Fill a ``TraceSettingResponse`` with ``settings`` (strings, or lists of strings)."""
    for name, value in settings.items():
        response.settings[name].value.extend(value if isinstance(value, list) else [value])
    return response
