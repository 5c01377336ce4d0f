"""Importing kserve_sdk, its HTTP handlers and the OpenAI package's model classes loads no pydantic; the OpenAI
types load it when first asked for. A fresh interpreter, since this process has pydantic loaded already."""
import subprocess
import sys

from conftest import ROOT


def test_importing_kserve_sdk_and_the_package_loads_no_pydantic():
    code = ("import sys, kserve_sdk as k, kserve_sdk.handlers.http; p = k.protocol.rest.openai; "
            "before = 'pydantic' in sys.modules; p.OpenAIGenerativeModel; mid = 'pydantic' in sys.modules; "
            "p.CompletionRequest; print(before, mid, 'pydantic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True"], out.stderr
