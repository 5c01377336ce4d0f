"""Git repositories, ``https://<host>/<path>.git`` (and ``http://``), cloned with the ``git`` command.

The default branch is cloned, one commit deep where the server allows it (git's dumb HTTP protocol does not:
then the whole history). Credentials, as KServe reads them: the user name from the URL
(``https://user@host/x.git``) or ``GIT_USERNAME``, the password from ``GIT_PASSWORD`` (or, failing that, from
the URL). They reach git through a credential helper reading this process's environment: never in git's
command line, its URL or its messages. Only http(s) transports are allowed (no submodules, no ``ext::``), no
prompt can block, and a transfer slower than 1 byte/s for ``KSERVE_SDK_STORAGE_TIMEOUT`` seconds fails.
"""
import os
import shutil
import subprocess
from typing import Dict, List, Optional, Tuple
from urllib.parse import unquote, urlsplit, urlunsplit

from . import settings
from .common import Patterns, StorageError, env_float, selected

USER_ENV, PASSWORD_ENV = "GIT_USERNAME", "GIT_PASSWORD"
_HELPER_USER, _HELPER_PASSWORD = "KSERVE_SDK_GIT_HELPER_USERNAME", "KSERVE_SDK_GIT_HELPER_PASSWORD"
# git runs this with "get", "store" or "erase"; it answers "get" from the two variables above, by name
_HELPER = ('!f() { test "$1" = get || exit 0; test -n "$' + _HELPER_USER + '" && printf "username=%s\\n" "$'
           + _HELPER_USER + '"; printf "password=%s\\n" "$' + _HELPER_PASSWORD + '"; }; f')
_SHALLOW_REFUSED = "does not support shallow"
# variables that would point git at another repository, and the password (it goes by the helper's name)
_NOT_PASSED = {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
               "GIT_NAMESPACE", PASSWORD_ENV}


def is_git(uri: str) -> bool:
    """Whether ``uri`` names a git repository: an http(s) URL whose path ends in ``.git``."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and unquote(parts.path).rstrip("/").endswith(".git")


def split_credentials(uri: str) -> Tuple[str, Optional[str], Optional[str]]:
    """(the URL without its password, user name, password) with KServe's precedence: the URL's user name,
    else GIT_USERNAME; GIT_PASSWORD, else the URL's password."""
    parts = urlsplit(uri)
    user = unquote(parts.username) if parts.username else os.environ.get(USER_ENV) or None
    password = os.environ.get(PASSWORD_ENV) or (unquote(parts.password) if parts.password else None)
    host = parts.netloc.rsplit("@", 1)[-1]
    netloc = f"{parts.username}@{host}" if parts.username else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)), user, password


def _environment(user: Optional[str], password: Optional[str]) -> Dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in _NOT_PASSED}
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_ALLOW_PROTOCOL": "http:https", "GIT_ASKPASS": "",
                "SSH_ASKPASS": "", "GIT_LFS_SKIP_SMUDGE": "1", "LC_ALL": "C",
                _HELPER_USER: user or "", _HELPER_PASSWORD: password or ""})
    bundle = settings.ca_bundle()
    if bundle and not (env.get("GIT_SSL_CAINFO") or env.get("GIT_SSL_CAPATH")):  # git's own spelling wins
        env["GIT_SSL_CAPATH" if os.path.isdir(bundle) else "GIT_SSL_CAINFO"] = bundle
    return env


def _command(url: str, dest: str, shallow: bool) -> List[str]:
    seconds = max(1, int(env_float("KSERVE_SDK_STORAGE_TIMEOUT", 60.0)))
    return ["git", "-c", "credential.helper=", "-c", f"credential.helper={_HELPER}",
            "-c", "http.lowSpeedLimit=1", "-c", f"http.lowSpeedTime={seconds}",
            "clone", "--quiet", "--no-recurse-submodules", *(["--depth", "1"] if shallow else []), "--", url, dest]


def _clone(url: str, dest: str, env: Dict[str, str], password: Optional[str]) -> None:
    git = shutil.which("git")
    if git is None:
        raise StorageError("git URIs need the git command, which is not installed (e.g. apt-get install git)")
    for shallow in (True, False):
        done = subprocess.run(_command(url, dest, shallow), env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, errors="replace")
        if done.returncode == 0:
            return
        if shallow and _SHALLOW_REFUSED in done.stderr:
            _empty(dest)
            continue
        raise StorageError(f"git clone failed: {_git_message(done.stderr, password)}")


def _git_message(stderr: str, password: Optional[str]) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    wanted = [line for line in lines if line.startswith(("fatal:", "error:"))] or lines[-1:]
    text = " ".join(wanted) or "no message from git"
    return text.replace(password, "***") if password else text


def _empty(path: str) -> None:
    for entry in os.listdir(path):
        full = os.path.join(path, entry)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.remove(full)


def _apply_patterns(root: str, allow_patterns: Patterns, ignore_patterns: Patterns) -> None:
    """Remove the checked-out files the patterns leave out (``.git`` itself is kept, as KServe keeps it)."""
    if not allow_patterns and not ignore_patterns:
        return
    for folder, dirs, names in os.walk(root, topdown=False):
        if folder == root and ".git" in dirs:
            dirs.remove(".git")
        rel_folder = os.path.relpath(folder, root)
        if rel_folder.split(os.sep)[0] == ".git":
            continue
        for name in names:
            rel = os.path.normpath(os.path.join(rel_folder, name)).replace(os.sep, "/")
            if not selected(rel, allow_patterns, ignore_patterns):
                os.remove(os.path.join(folder, name))
        if folder != root and not os.listdir(folder):
            os.rmdir(folder)


def download(uri: str, dest: str, allow_patterns: Patterns = None, ignore_patterns: Patterns = None) -> None:
    url, user, password = split_credentials(uri)
    _clone(url, dest, _environment(user, password), password)
    _apply_patterns(dest, allow_patterns, ignore_patterns)
