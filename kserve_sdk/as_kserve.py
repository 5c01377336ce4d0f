"""Put ``import kserve_sdk.as_kserve`` first in a script written for KServe, and it runs unchanged.

From that line on, in this process, ``import kserve`` gives ``kserve_sdk`` and ``import kserve.<x>`` gives
``kserve_sdk.<x>`` (the same module objects, not copies), even when the real KServe is installed too.
``python -m kserve_sdk script.py`` does the same without editing the script. See docs/kserve-compat.md.
"""
from .server.import_alias import install

install()
