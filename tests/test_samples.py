"""The samples as a user runs them, their InferenceService YAMLs, and the getting-started page.

For each sample of SAMPLES:
- the `pip install` line of its README runs in a fresh virtual environment (the test's Python, no
  site packages), with kserve-sdk built from this checkout put first on the line, so the `kserve-sdk`
  requirement is met by the local code (pip's own cache is shared between the environments);
- `honcho check` passes, and every `honcho start` line of the README starts the Procfile on free
  loopback ports (`-p` sets $PORT; GRPC_PORT and PREDICTOR_PORT are set for the other ports);
- every README command that talks to localhost runs, with those ports swapped in, and prints what the
  expected file says (input*.json -> output*.json or output*.txt) and what the `# ...` lines right
  under it say;
- every InferenceService YAML validates against tests/schemas/inferenceservice.schema.json and agrees
  with the Procfile, the server's flags and the image the README builds;
- .python-version names the Python running these tests.

The getting-started page runs command by command on a clean clone of this checkout (its committed
tree with the working tree's changes laid over it).

Every process started here is stopped by its PID (its process group); everything listens on 127.0.0.1.
"""
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

import jsonschema
import pytest
import yaml

from helpers import (
    LAUNCHER,
    ROOT,
    SAMPLES_DIR,
    flag_values,
    free_port,
    markdown_parts,
    post_json,
    procfile,
    readme_commands,
    same_line,
    server_flags,
    shell_commands,
    split_command,
    wait_ready,
)

SCHEMA = os.path.join(ROOT, "tests", "schemas", "inferenceservice.schema.json")
# The samples of issue 9 and openai_chat (issue 19), each run here in its own fresh environment. (A sample
# whose requirements take minutes to install, such as samples/parallel_ray with Ray, is tested by its own
# test file.)
SAMPLES = sorted({"custom_model", "custom_grpc", "text_stream", "transformer", "logging", "openai_chat",
                  "continuous_batching"})
PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
PORT_FLAGS = {"--http_port": "http1", "--grpc_port": "h2c"}
# The environment a user's shell would give: no virtual environment or PYTHONPATH of the test run.
BASE_ENV = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")}


# --- processes ----------------------------------------------------------------------------------------
def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process (honcho passes it on), then SIGKILL to whatever is left of its group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def read(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


def run(argv, cwd: str, env: Dict[str, str], timeout: float = 60, shell: bool = False) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, shell=shell,
                         executable="/bin/bash" if shell else None)
    assert out.returncode == 0, f"{argv!r} exited {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return out


# --- the sample environments ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def workdir():
    """Scratch space for the venvs, the wheelhouse and the clone: in memory (/dev/shm) when there is room,
    since writing and deleting a few GB of installed packages is most of this file's time on a disk."""
    shm = "/dev/shm"
    in_memory = os.path.isdir(shm) and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 6 * 2**30
    path = tempfile.mkdtemp(prefix="kserve-sdk-samples-", dir=shm if in_memory else None)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def kserve_wheel(workdir) -> str:
    """kserve-sdk as a wheel built from this checkout."""
    out = os.path.join(workdir, "wheel")
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", out, ROOT], ROOT, BASE_ENV,
        timeout=300)
    (name,) = os.listdir(out)
    return os.path.join(out, name)


def pip_install_line(sample: str) -> List[str]:
    """The arguments of the README's `pip install` line, requirement files made absolute."""
    lines = [cmd for cmd, _ in readme_commands(sample) if cmd.startswith("pip install ")]
    assert len(lines) == 1, f"samples/{sample}/README.md should show one `pip install` line, not {lines}"
    args = shlex.split(lines[0], comments=True)[2:]
    return [os.path.normpath(os.path.join(SAMPLES_DIR, sample, a)) if prev == "-r" else a
            for prev, a in zip([""] + args, args, strict=False)]  # pairs each argument with the one before it


@pytest.fixture(scope="module")
def wheelhouse(kserve_wheel, workdir) -> str:
    """Every distribution the samples' pip lines need, resolved once against the configured package
    indexes and kept as files: the per-sample installs then resolve their own requirements against
    this folder instead of asking the indexes again, five times over."""
    folder = os.path.join(workdir, "wheelhouse")
    wanted = [arg for sample in SAMPLES for arg in pip_install_line(sample)]
    # and what hack/serve.sh installs on the clean clone: the package with its samples extra, built
    # (editable) with the build requirements of pyproject.toml
    # (the extra's requirements named one by one: older pips do not merge `wheel[extra]` with the samples'
    # `kserve-sdk` requirement)
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        build_requires = tomllib.load(f)["build-system"]["requires"]
    run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--dest", folder,
         kserve_wheel, *samples_extra(), *extra_requirements("redis"), *build_requires, *wanted], ROOT, BASE_ENV,
        timeout=600)
    return folder


def extra_requirements(extra: str) -> List[str]:
    """The requirements of one extra of setup.cfg (getting-started.md installs `redis` as its example)."""
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    return [line.strip() for line in cfg["options.extras_require"][extra].splitlines()
            if line.strip() and not line.strip().startswith("#")]


def samples_extra() -> List[str]:
    """The requirements of setup.cfg's `samples` extra."""
    return extra_requirements("samples")


def make_env(sample: str, wheel: str, wheelhouse: str, root: str) -> str:
    """A fresh venv holding what the sample's README installs, kserve-sdk coming from `wheel`."""
    venv = os.path.join(root, "venv-" + sample)
    run([sys.executable, "-m", "venv", "--without-pip", venv], ROOT, BASE_ENV)
    python = os.path.join(venv, "bin", "python")
    # pip runs from the test environment against the new interpreter (`--python`), so the venv gets only
    # what the README line names (and what that needs).
    run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-compile",
         "--disable-pip-version-check", "--no-index", "--find-links", wheelhouse, wheel, *pip_install_line(sample)],
        os.path.join(SAMPLES_DIR, sample), BASE_ENV, timeout=600)
    return venv


@pytest.fixture(scope="module")
def sample_envs(kserve_wheel, wheelhouse, workdir) -> Dict[str, "concurrent.futures.Future[str]"]:
    """One fresh venv per sample, built in the background (two at a time, while the getting-started test
    runs); a test waits for its own."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    futures = {s: pool.submit(make_env, s, kserve_wheel, wheelhouse, workdir) for s in SAMPLES}
    yield futures
    pool.shutdown(wait=True)


def venv_env(venv: str, **extra: str) -> Dict[str, str]:
    env = {**BASE_ENV, "VIRTUAL_ENV": venv, "PATH": os.path.join(venv, "bin") + os.pathsep + BASE_ENV["PATH"],
           "PYTHONUNBUFFERED": "1"}
    env.update(extra)
    return env


# --- static checks ------------------------------------------------------------------------------------
@pytest.mark.parametrize("sample", SAMPLES)
def test_sample_is_self_contained(sample):
    folder = os.path.join(SAMPLES_DIR, sample)
    for name in ("requirements.txt", ".python-version", "Procfile", "input.json", "README.md"):
        assert os.path.isfile(os.path.join(folder, name)), f"samples/{sample} has no {name}"
    assert any(re.fullmatch(r"output[\w-]*\.(json|txt)", n) for n in os.listdir(folder)), "no expected output file"
    with open(os.path.join(folder, "requirements.txt")) as f:
        assert re.search(r"^kserve-sdk\b", f.read(), re.M), "requirements.txt should name kserve-sdk"
    with open(os.path.join(folder, ".python-version")) as f:
        assert f.read().strip() == PYTHON_VERSION, ".python-version should be the Python the tests run"
    with open(os.path.join(folder, "README.md")) as f:
        readme = f.read()
    for needed in ("pack build", "docker run", "curl", "kubectl apply", "INGRESS_HOST", "honcho start"):
        assert needed in readme, f"samples/{sample}/README.md does not show `{needed}`"


def test_repository_is_buildpacks_ready():
    """The top-level Procfile, .python-version and requirements.txt build and serve custom_model."""
    with open(os.path.join(ROOT, ".python-version")) as f:
        assert f.read().strip() == PYTHON_VERSION
    assert procfile(ROOT)["web"].startswith("python -m samples.custom_model")
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        lines = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    assert lines == [".[samples]"]  # the package and the default sample's scikit-learn
    with open(os.path.join(SAMPLES_DIR, "custom_model", "requirements.txt")) as f:
        sample_pins = {ln.split("==")[0]: ln.strip() for ln in f if "==" in ln}
    # the sample's pins, and tritonclient's HTTP client for the README's examples
    assert [r for r in samples_extra() if "==" in r] == list(sample_pins.values())
    assert [r for r in samples_extra() if "==" not in r] == ["tritonclient[http]>=2.40"]


# --- InferenceService YAMLs -------------------------------------------------------------------------------
def script_flags(path: str) -> set:
    """Flags a sample script adds to the server's parser."""
    with open(path) as f:
        return set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", f.read()))


def image_owner(image: str) -> str:
    """The sample whose README builds `image` with pack, from its own folder."""
    owners = [s for s in SAMPLES
              if re.search(rf"^pack build {re.escape(image)}\s", read(os.path.join(SAMPLES_DIR, s, "README.md")), re.M)]
    assert len(owners) == 1, f"no single sample README builds {image}: {owners}"
    return owners[0]


def isvc_files() -> List[Tuple[str, str]]:
    found = []
    for sample in SAMPLES:
        for name in sorted(os.listdir(os.path.join(SAMPLES_DIR, sample))):
            if name.endswith((".yaml", ".yml")):
                with open(os.path.join(SAMPLES_DIR, sample, name)) as f:
                    doc = yaml.safe_load(f)
                if isinstance(doc, dict) and doc.get("kind") == "InferenceService":
                    found.append((sample, name))
    return found


def test_every_sample_has_an_inference_service():
    assert {s for s, _ in isvc_files()} == set(SAMPLES)
    names = dict(isvc_files())
    assert names["custom_model"] == "custom.yaml" and names["custom_grpc"] == "custom_grpc.yaml"


@pytest.mark.parametrize("sample,name", isvc_files())
def test_inference_service(sample, name):
    with open(SCHEMA) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    with open(os.path.join(SAMPLES_DIR, sample, name)) as f:
        doc = yaml.safe_load(f)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)

    known = server_flags()
    model_names = {}
    for component in ("predictor", "transformer"):
        if component not in doc["spec"]:
            continue
        (container,) = doc["spec"][component]["containers"]
        # the image is one that a sample's README builds, and the container runs that sample's Procfile
        # program (through the buildpacks launcher) with flags the server (or the script) knows
        owner = image_owner(container["image"])
        program, procfile_flags = split_command(procfile(os.path.join(SAMPLES_DIR, owner))["web"])
        assert container["command"] == LAUNCHER + program, (component, container["command"])
        args = flag_values(container.get("args", []))
        script = os.path.join(SAMPLES_DIR, owner, program[-1])
        unknown = set(args) - known - script_flags(script)
        assert not unknown, f"{component} args use flags the server does not have: {unknown}"
        for flag, value in args.items():
            if flag not in PORT_FLAGS and flag in procfile_flags and flag != "--log_config_file":
                assert value == procfile_flags[flag], (component, flag, value, procfile_flags[flag])
        model_names[component] = args.get("--model_name", procfile_flags.get("--model_name"))
        # the one routed port is the server's HTTP port (http1) or its gRPC port (h2c), and that port is on
        (port,) = container["ports"]
        kind = port.get("name", "http1")
        flag = "--http_port" if kind == "http1" else "--grpc_port"
        assert int(args.get(flag, procfile_flags.get(flag))) == port["containerPort"], (component, port, args)
        if kind == "h2c":
            assert args.get("--enable_grpc", procfile_flags.get("--enable_grpc", "true")) == "true"
        if component == "transformer":
            # KServe adds --predictor_host and --http_port 8080 to a transformer's args
            assert "--predictor_host" not in args and port["containerPort"] == 8080
    if "transformer" in model_names:
        assert model_names["transformer"] == model_names["predictor"], "the transformer forwards under its own name"


# --- the getting-started page on a clean clone ---------------------------------------------------------------
def clean_clone(dest: str) -> None:
    """`git clone` of this checkout, with the working tree's uncommitted changes laid over it (in CI,
    where the checkout is a fresh clone, there are none)."""
    run(["git", "clone", "--quiet", ROOT, dest], ROOT, BASE_ENV, timeout=120)
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], ROOT, BASE_ENV).stdout
    present = set()
    for path in filter(None, listed.split("\0")):
        src = os.path.join(ROOT, path)
        if os.path.isfile(src):
            present.add(path)
            os.makedirs(os.path.dirname(os.path.join(dest, path)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, path))
    tracked = run(["git", "ls-files", "-z"], dest, BASE_ENV).stdout
    for path in filter(None, tracked.split("\0")):
        if path not in present and os.path.exists(os.path.join(dest, path)):
            os.unlink(os.path.join(dest, path))


@pytest.mark.timeout(900)
def test_getting_started_commands_work_on_a_clean_clone(workdir, wheelhouse, sample_envs):
    """Every command of docs/getting-started.md, in order, on a clean clone:
    - a command marked `# keep it running` starts in the background, on free ports (the test adds
      `--http_port`/`--grpc_port`, which hack/serve.sh passes on), and is waited for until ready;
    - a paragraph saying Ctrl-C stops it;
    - `localhost:8080`/`:8081` in the other commands become those ports, and each command's output must be
      what the `# ...` lines under it say;
    - a ```python title="file" block is saved as that file;
    - `bash hack/test.sh` is the one command not run here: it is the command running this suite, and CI
      runs it on a fresh clone (.ci/run), so running it inside itself would prove nothing more.
    pip takes packages from the wheelhouse (resolved against the real indexes by the fixture), without
    byte-compiling them: the same installs, without asking the indexes again. The samples' environments
    are built meanwhile (`sample_envs`).

    Then the repository itself, as buildpacks would start it: its Procfile under honcho, with the
    clone's .venv.
    """
    clone = os.path.join(workdir, "clone")
    clean_clone(clone)
    with open(os.path.join(clone, "docs", "getting-started.md")) as f:
        page = f.read()
    http, grpc = free_port(), free_port()
    env = {**BASE_ENV, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheelhouse, "PIP_NO_COMPILE": "1"}
    background: List[subprocess.Popen] = []
    ran: List[str] = []
    try:
        for kind, info, body in markdown_parts(page):
            if kind == "text":
                if "Ctrl-C" in body:
                    while background:
                        stop(background.pop())
                continue
            title = re.search(r'title="([^"]+)"', info)
            if title:
                with open(os.path.join(clone, title.group(1)), "w") as f:
                    f.write(body)
                continue
            if info not in ("sh", "bash", "shell"):
                continue
            for command, expected_lines in shell_commands(body):
                ran.append(command)
                if command.split("#")[0].strip() == "bash hack/test.sh":
                    continue
                if "keep it running" in command:
                    argv = shlex.split(command, comments=True) + ["--http_port", str(http), "--grpc_port", str(grpc)]
                    log = os.path.join(workdir, f"getting-started-{len(ran)}.log")
                    with open(log, "w") as out:
                        proc = subprocess.Popen(argv, cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                start_new_session=True)
                    background.append(proc)
                    wait_ready(http, proc, log, timeout=600)
                    continue
                command = command.replace("localhost:8080", f"127.0.0.1:{http}").replace("localhost:8081",
                                                                                          f"127.0.0.1:{grpc}")
                out = run(command, clone, env, timeout=120, shell=True).stdout
                check_output(command, out, expected_lines)
        assert background == [], "the page leaves a server running"

        # the repository as buildpacks starts it: the top-level Procfile's web process
        honcho = os.path.join(os.path.dirname(sys.executable), "honcho")
        venv = os.path.join(clone, ".venv")
        run([honcho, "check"], clone, venv_env(venv))
        log = os.path.join(workdir, "getting-started-procfile.log")
        with open(log, "w") as out:
            proc = subprocess.Popen([honcho, "start", "-p", str(http)], cwd=clone,
                                    env=venv_env(venv, GRPC_PORT=str(grpc)), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        background.append(proc)
        wait_ready(http, proc, log)
        status, _, body = post_json(http, "/v1/models/model:predict",
                                    {"instances": [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.8, 2.2]]})
        assert (status, body) == (200, {"predictions": [0, 2]})
        check_readme_examples(clone, http, workdir)
    finally:
        for proc in background:
            stop(proc)
    assert ran[0] == "bash hack/serve.sh        # keep it running, and open a second terminal"
    assert "bash hack/test.sh" in ran
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert "exec bash hack/test.sh" in f.read()
    with open(os.path.join(ROOT, "README.md")) as f:
        readme_start = f.read(400)
    assert "bash hack/serve.sh" in readme_start and "bash hack/test.sh" in readme_start


def check_readme_examples(clone: str, sample_port: int, workdir: str) -> None:
    """The README's examples as a newcomer runs them, in the environment its own commands made (the
    clone's .venv, from `bash hack/serve.sh`):
    - a Python block that serves a model (`__main__`) is saved as the file the next shell block runs
      with `python`; that server is started on free ports and the block's other commands are its calls;
    - every other Python block and shell command talking to localhost runs against the served sample
      (`sample_port`);
    - each prints what its `# ...` lines say (for Python, the comment closing its `print` line)."""
    with open(os.path.join(clone, "README.md")) as f:
        blocks = [(info, body) for kind, info, body in markdown_parts(f.read()) if kind == "code"]
    python_blocks = 0
    for i, (info, body) in enumerate(blocks):
        if info == "python" and "__main__" in body:
            python_blocks += 1
            (start, _), *calls = shell_commands(blocks[i + 1][1])
            script = re.search(r"python (\S+\.py)", start).group(1)
            with open(os.path.join(clone, script), "w") as f:
                f.write(body)
            serve_readme_model(clone, start, calls, workdir)
        elif info == "python":
            python_blocks += 1
            code = body.replace("localhost:8080", f"127.0.0.1:{sample_port}")
            out = run([os.path.join(clone, ".venv", "bin", "python"), "-c", code], clone, BASE_ENV).stdout
            assert out.splitlines() == re.findall(r"^print\(.*#\s*(.+?)\s*$", body, re.M), (body, out)
        elif info in ("sh", "bash", "shell") and (i == 0 or "__main__" not in blocks[i - 1][1]):
            for command, expected_lines in shell_commands(body):
                if "localhost:" in command:
                    command = command.replace("localhost:8080", f"127.0.0.1:{sample_port}")
                    check_output(command, run(command, clone, BASE_ENV, shell=True).stdout, expected_lines)
    assert python_blocks >= 2, "the README's Python examples were not found"


def serve_readme_model(clone: str, start: str, calls: List[Tuple[str, List[str]]], workdir: str) -> None:
    """Start the README's `python my_model.py --http_port 8080 ...` line on free ports and run its calls."""
    ports = {"8080": str(free_port()), "8081": str(free_port())}
    argv = [ports.get(token, token) for token in shlex.split(start, comments=True)]
    log = os.path.join(workdir, "readme-model.log")
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=clone, env=BASE_ENV, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_ready(int(ports["8080"]), proc, log)
        for command, expected_lines in calls:
            command = command.replace("localhost:8080", f"127.0.0.1:{ports['8080']}")
            check_output(command, run(command, clone, BASE_ENV, shell=True).stdout, expected_lines)
    finally:
        stop(proc)


# --- running the samples ------------------------------------------------------------------------------------
def honcho_runs(sample: str) -> List[Tuple[List[str], List[Tuple[str, List[str]]]]]:
    """The README's ways to start the sample, each with the client commands meant for it: a shell block
    with `honcho start` lines (alternatives of one another) starts a run, and the commands that talk to
    localhost after it, up to the next such block, are that run's."""
    with open(os.path.join(SAMPLES_DIR, sample, "README.md")) as f:
        blocks = [shell_commands(body) for kind, info, body in markdown_parts(f.read())
                  if kind == "code" and info in ("sh", "bash", "shell")]
    runs: List[Tuple[List[str], List[Tuple[str, List[str]]]]] = []
    for commands in blocks:
        starts = [cmd for cmd, _ in commands if "honcho start" in cmd]
        if starts:
            runs.append((starts, []))
        clients = [(cmd, expected) for cmd, expected in commands if "localhost:" in cmd
                   and cmd.split()[0] not in ("docker", "pack", "kubectl", "honcho") and "honcho start" not in cmd]
        assert runs or not clients, f"samples/{sample}/README.md calls the server before it shows `honcho start`"
        if clients:
            runs[-1][1].extend(clients)
    assert runs, f"samples/{sample}/README.md shows no `honcho start`"
    return runs


def expected_output(sample: str, command: str) -> Optional[Tuple[str, str]]:
    m = re.search(r"\binput([\w-]*)\.json\b", command)
    if not m:
        return None
    for ext in ("json", "txt"):
        path = os.path.join(SAMPLES_DIR, sample, f"output{m.group(1)}.{ext}")
        if os.path.exists(path):
            return ext, read(path)
    raise AssertionError(f"samples/{sample}: no output{m.group(1)}.json or .txt for {command!r}")


def check_output(command: str, out: str, expected_lines: List[str],
                 expected: Optional[Tuple[str, str]] = None) -> None:
    """`out` is the expected file's content (JSON or text) and what the `# ...` lines say."""
    if expected:
        kind, text = expected
        if kind == "json":
            assert json.loads(out) == json.loads(text), (command, out)
        else:
            assert out.strip() == text.strip(), (command, out)
    if expected_lines:
        got = [ln for ln in out.splitlines() if ln.strip()]
        assert len(got) == len(expected_lines) and all(map(same_line, got, expected_lines)), \
            f"{command}\nprinted:\n{out}\nthe README says:\n" + "\n".join(expected_lines)


# honcho prints a line as `print(prefix + line)`: the text, then the newline, in two writes. Its
# SIGTERM handler runs in the same thread and can print "hh:mm:ss system | SIGTERM received" between
# the two, which glues that message to the end of the server's last line. It is honcho's, not ours.
honcho_glue = re.compile(r"\d\d:\d\d:\d\d system\s*\| .*$")


def check_logs(sample: str, env: Dict[str, str], log: str) -> None:
    """What the logging sample's two configs promise about the lines the server writes."""
    if sample != "logging":
        return
    lines = [honcho_glue.sub("", ln.split("| ", 1)[1]) for ln in read(log).splitlines()
             if re.match(r"\S+ web\.1\s+\| ", ln)]
    if env.get("LOG_CONFIG", "log_config.json").endswith(".json"):
        records = [json.loads(ln) for ln in lines]  # every line is one JSON object
        assert all(set(r) >= {"time", "level", "logger", "message"} for r in records)
        assert any(r["logger"] == "kserve" and r["message"] == "model words loaded" for r in records)
        assert any(r["logger"] == "kserve.trace" for r in records)
        assert any(r["logger"] == "tornado.access" and "POST /v1/models/words:predict" in r["message"]
                   for r in records)
    else:
        assert any(re.search(r" DEBUG kserve: counted the words of 2 texts$", ln) for ln in lines), lines
        assert not any("kserve.trace" in ln for ln in lines)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("sample", SAMPLES)
def test_sample_runs_as_its_readme_shows(sample, sample_envs, workdir):
    folder = os.path.join(SAMPLES_DIR, sample)
    venv = sample_envs[sample].result()
    run(["honcho", "check"], folder, venv_env(venv))
    runs = honcho_runs(sample)
    assert any(expected_output(sample, cmd) for _, clients in runs for cmd, _ in clients), \
        "no README command sends input.json"
    for line, clients in ((line, clients) for starts, clients in runs for line in starts):
        tokens = shlex.split(line, comments=True)
        assignments = {}
        while "=" in tokens[0]:
            key, value = tokens.pop(0).split("=", 1)
            assignments[key] = value
        http, grpc, predictor = free_port(), free_port(), free_port()
        argv = [t if t != "8080" else str(http) for t in tokens]
        assert argv[:3] == ["honcho", "start", "-p"], line
        env = venv_env(venv, GRPC_PORT=str(grpc), PREDICTOR_PORT=str(predictor), **assignments)
        log = os.path.join(workdir, f"honcho-{sample}.log")
        with open(log, "w") as out:
            proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            wait_ready(http, proc, log)
            if "predictor:" in read(os.path.join(folder, "Procfile")):
                wait_ready(predictor, proc, log)
            for command, expected_lines in clients:
                command = (command.replace("localhost:8080", f"127.0.0.1:{http}")
                           .replace("localhost:8081", f"127.0.0.1:{grpc}"))
                out = run(command, folder, env, timeout=60, shell=True).stdout
                check_output(command, out, expected_lines, expected_output(sample, command))
        finally:
            stop(proc)
        check_logs(sample, env, log)


@pytest.mark.timeout(900)
def test_train_script_makes_the_committed_model(sample_envs, workdir):
    """custom_model/train.py, run in the sample's environment, trains what model/model.joblib holds;
    custom_grpc carries the same classifier."""
    venv = sample_envs["custom_model"].result()
    fresh = os.path.join(workdir, "retrained.joblib")
    folder = os.path.join(SAMPLES_DIR, "custom_model")
    run(["python", "train.py", "--out", fresh], folder, venv_env(venv))
    import joblib
    from sklearn.datasets import load_iris
    features, _ = load_iris(return_X_y=True)
    retrained = joblib.load(fresh)
    for committed in (os.path.join(folder, "model", "model.joblib"),
                      os.path.join(SAMPLES_DIR, "custom_grpc", "model", "model.joblib")):
        model = joblib.load(committed)
        assert (model.predict(features) == retrained.predict(features)).all(), committed
        assert abs(model.predict_proba(features) - retrained.predict_proba(features)).max() < 1e-6, committed


