"""KServe's time-series forecast API as one feature: the model family (``model.py``), the forecast call
(``dataplane.py``) and the route ``POST /v1/timeseries/forecast`` (``api.py``). The wire types are at KServe's
path, ``kserve_sdk.protocol.rest.timeseries``."""
