"""The OpenAI-compatible API as one feature: its models (``model.py``, ``chat_adapter.py``, ``proxy.py``), its
data plane (``dataplane.py``) and its REST routes (``api.py``). KServe's import path for the models is
``kserve_sdk.protocol.rest.openai``; nothing here is imported until an OpenAI model or route needs it."""
