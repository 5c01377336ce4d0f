"""docs/server.md lists every command-line flag and environment variable the server reads, and no others.

- Flags: the first column of the table under "## Flags" names each flag of `kserve_sdk.model_server.parser`
  once, and nothing else; the default column shows the parser's default where it does not depend on the
  environment.
- Environment: every variable the server reads by a literal name (outside kserve_sdk/storage) is in the
  table under "## Environment", and every variable of that table is read somewhere in kserve_sdk. The
  model-storage variables (kserve_sdk/storage) must appear somewhere in docs/ (the storage page).
- Every `--flag` written anywhere in docs/ that looks like one of the server's is one of the server's.
- Every relative link in docs/ and the samples' READMEs leads to a file or folder that exists.
- The examples of the protocol pages run against the sample model served as `model` (as
  `bash hack/serve.sh` serves it): each curl command prints what the `# ...` lines under it say, and each
  Python block runs and prints what its `# ...` comments say.
"""
import os
import re
import subprocess
import sys
from typing import Dict, List

import pytest

from helpers import ROOT

DOCS = os.path.join(ROOT, "docs")
PACKAGE = os.path.join(ROOT, "kserve_sdk")
# Defaults that come from the environment or the machine, shown in words in the table.
ENV_DEPENDENT_DEFAULTS = {"--model_dir", "--predictor_protocol", "--ssl_certfile", "--ssl_keyfile"}
ENV_READ = [
    r'os\.environ\.get\(\s*"([A-Z][A-Z0-9_]*)"',
    r'os\.environ\[\s*"([A-Z][A-Z0-9_]*)"\s*\]',
    r'os\.getenv\(\s*"([A-Z][A-Z0-9_]*)"',
    r'"([A-Z][A-Z0-9_]*)"\s+(?:not\s+)?in\s+os\.environ',
    r'\b[A-Z][A-Z0-9_]*_ENV\s*=\s*"([A-Z][A-Z0-9_]*)"',
]


def section_table(page: str, heading: str) -> List[List[str]]:
    """The rows (cells) of the first table under `## heading` in docs/<page>."""
    with open(os.path.join(DOCS, page)) as f:
        text = f.read()
    match = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/{page} has no '## {heading}' section"
    rows = [line.strip().strip("|").split("|") for line in match.group(1).splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row] for row in rows[2:]]  # past the header and the |---| line


def parser_actions() -> Dict[str, object]:
    from kserve_sdk import model_server
    return {opt: action for action in model_server.parser._actions
            for opt in action.option_strings if opt.startswith("--")}


def documented_flags() -> Dict[str, List[str]]:
    rows = {}
    for row in section_table("server.md", "Flags"):
        names = re.findall(r"`(--[\w-]+)`", row[0])
        assert len(names) == 1, f"one flag per row in docs/server.md, not {row[0]!r}"
        assert names[0] not in rows, f"{names[0]} is listed twice"
        rows[names[0]] = row
    return rows


def test_docs_list_every_flag_and_only_those():
    in_parser, in_docs = set(parser_actions()), set(documented_flags())
    assert in_parser - in_docs == set(), "flags the docs do not list"
    assert in_docs - in_parser == set(), "flags the docs list but the server does not have"


def render(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@pytest.mark.parametrize("flag", sorted(set(parser_actions()) - ENV_DEPENDENT_DEFAULTS))
def test_documented_default_is_the_parsers(flag):
    action = parser_actions()[flag]
    row = documented_flags().get(flag)
    assert row is not None, f"{flag} is not in docs/server.md"
    assert len(row) >= 3, f"the row of {flag} needs flag | default | meaning"
    if action.default is None:
        assert row[1] and row[1] != "None", f"say what {flag} does when it is not given"
    else:
        assert re.search(rf"(?<![\w.]){re.escape(render(action.default))}(?![\w.])", row[1]), \
            f"docs/server.md gives {flag} the default {row[1]!r}, the parser {action.default!r}"


def test_every_flag_row_says_what_it_does():
    for flag, row in documented_flags().items():
        assert len(row) >= 3 and len(row[-1]) > 10, f"{flag}: no meaning given"


def source_files(under: str) -> List[str]:
    found = []
    for folder, _, files in os.walk(under):
        found += [os.path.join(folder, f) for f in files if f.endswith(".py")]
    return found


def env_reads(files: List[str]) -> set:
    names = set()
    for path in files:
        with open(path) as f:
            text = f.read()
        for pattern in ENV_READ:
            names.update(re.findall(pattern, text))
    return names


def test_docs_list_every_environment_variable():
    storage = os.path.join(PACKAGE, "storage")
    server_files = [p for p in source_files(PACKAGE) if not p.startswith(storage + os.sep)]
    documented = set()
    for row in section_table("server.md", "Environment"):
        documented.update(re.findall(r"`([A-Z][A-Z0-9_]*)`", row[0]))
    assert env_reads(server_files) - documented == set(), "variables the server reads that docs/server.md omits"
    source = "".join(open(p).read() for p in source_files(PACKAGE))
    assert {name for name in documented if f'"{name}"' not in source} == set(), \
        "variables docs/server.md lists that kserve_sdk never reads"
    all_docs = "".join(open(os.path.join(DOCS, p)).read() for p in os.listdir(DOCS) if p.endswith(".md"))
    storage_vars = env_reads(source_files(storage))
    assert {name for name in storage_vars if name not in all_docs} == set(), "storage variables no page documents"


def test_flags_written_in_the_docs_exist():
    """A `--snake_case` word in docs/ that is not the server's is a typo or a stale flag (other tools' flags,
    such as pip's or pack's, are written with dashes)."""
    known = set(parser_actions())
    own = {"--delay_ms"}  # flags a sample script adds to the server's parser
    stale = {}
    for page in os.listdir(DOCS):
        if page.endswith(".md"):
            with open(os.path.join(DOCS, page)) as f:
                for flag in re.findall(r"(?<![\w-])(--[a-z]+_[a-z_]+)\b", f.read()):
                    if flag not in known | own:
                        stale.setdefault(flag, page)
    assert stale == {}, f"flags in docs/ that the server does not have: {stale}"


def test_relative_links_resolve():
    pages = [os.path.join(DOCS, p) for p in os.listdir(DOCS) if p.endswith(".md")]
    samples = os.path.join(ROOT, "samples")
    pages += [os.path.join(samples, d, "README.md") for d in os.listdir(samples)
              if os.path.isfile(os.path.join(samples, d, "README.md"))]
    broken = []
    for page in pages:
        with open(page) as f:
            for target in re.findall(r"\]\(([^)\s]+)\)", f.read()):
                path = target.split("#")[0]
                if path and not re.match(r"[a-z]+:", path):
                    if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(page), path))):
                        broken.append(f"{os.path.relpath(page, ROOT)} -> {target}")
    assert broken == []


PROTOCOL_PAGES = ["protocol-v1.md", "protocol-v2.md", "grpc.md"]


def page_examples(page: str):
    """(language, code) of the fenced blocks of a page."""
    with open(os.path.join(DOCS, page)) as f:
        return re.findall(r"^```(\w*)[^\n]*\n(.*?)^```", f.read(), re.M | re.S)


def same(got: str, want: str) -> bool:
    import json
    try:
        return json.loads(got) == json.loads(want)
    except ValueError:
        return got.strip() == want.strip()


@pytest.fixture(scope="module")
def sample_server(start_server):
    """samples/custom_model served as `model`, as hack/serve.sh serves it (with shared memory on, as the v2
    page's shared-memory example asks)."""
    return start_server("samples/custom_model/model.py", "--model_name", "model", "--allow_client_shm", "true")


@pytest.mark.parametrize("page", PROTOCOL_PAGES)
def test_protocol_page_examples(page, sample_server):
    def local(text: str) -> str:
        return (text.replace("localhost:8080", f"127.0.0.1:{sample_server.http_port}")
                .replace("localhost:8081", f"127.0.0.1:{sample_server.grpc_port}"))

    env = {**os.environ, "PYTHONPATH": ROOT}
    ran = 0
    for language, code in page_examples(page):
        if language == "sh":
            lines = code.splitlines()
            for i, line in enumerate(lines):
                if "localhost:" not in line or line.startswith("#"):
                    continue
                expected = []
                for following in lines[i + 1:]:
                    if not following.startswith("# "):
                        break
                    expected.append(following[2:])
                out = subprocess.run(local(line), shell=True, executable="/bin/bash", capture_output=True,
                                     text=True, timeout=30)
                assert out.returncode == 0, (line, out.stderr)
                got = [ln for ln in out.stdout.splitlines() if ln.strip()]
                assert len(got) == len(expected) and all(map(same, got, expected)), (line, out.stdout, expected)
                ran += 1
        elif language == "python":
            out = subprocess.run([sys.executable, "-c", local(code)], capture_output=True, text=True, timeout=60,
                                 env=env, cwd=ROOT)
            assert out.returncode == 0, (code, out.stderr)
            # `print(...)   # what it prints` comments, in order
            promised = [m.group(1).strip() for m in re.finditer(r"^print\(.*\)\s+# (.*)$", code, re.M)]
            printed = out.stdout.splitlines()
            for want in promised:
                assert any(line.startswith(want) or line == want for line in printed), (want, out.stdout)
            ran += 1
    assert ran, f"docs/{page} has no example to run"
