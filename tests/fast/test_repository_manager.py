"""The repository manager in process (kserve_sdk.repository.manager), with stand-in hooks for the data plane:
which version a request reaches, the index of versions never loaded, a busy model never evicted (NoRoom says
why), concurrent lazy requests loading once, and the backoff of failed lazy loads."""
import asyncio
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from kserve_sdk.errors import ModelNotReady, ModelVersionNotFound
from kserve_sdk.repository.lru import NoRoom
from kserve_sdk.repository.manager import MOST_BACKOFF_SECONDS, RepositoryManager, ServingHooks
from kserve_sdk.repository.options import RepositoryOptions

#: Each repository model's model.py: a model that notes its loads in the file its settings name.
MODEL_PY = """from kserve_sdk import Model


class Echo(Model):
    def load(self):
        with open(self.settings_extra["events"], "a") as f:
            f.write(f"load {self.name} {self.version or '-'}\\n")
        self.ready = True
        return True
"""


class Hooks:
    """What the data plane does, recorded: the objects served by (name, version), and the default ones."""

    def __init__(self) -> None:
        self.served: Dict[Tuple[str, str], Any] = {}
        self.defaults: Dict[str, Any] = {}

    def serve(self, name: str, version: str, model: Any, default: bool) -> None:
        self.served[(name, version)] = model
        if default:
            self.defaults[name] = model

    def withdraw(self, name: str, version: str, model: Any) -> None:
        if self.served.get((name, version)) is model:
            del self.served[(name, version)]
        if self.defaults.get(name) is model:
            del self.defaults[name]

    async def warm_up(self, name: str, model: Any) -> Optional[str]:
        return None

    def hooks(self) -> ServingHooks:
        return ServingHooks(self.serve, self.withdraw, self.warm_up)


def repository(root: Path, models: Dict[str, List[str]], log: Path) -> str:
    """Echo models in numbered folders (``[]``: no versions), each load appended to ``log``."""
    for name, versions in models.items():
        settings = {"implementation": "model.Echo", "version_policy": {"all": {}} if versions else None,
                    "parameters": {"extra": {"events": str(log)}}}
        (root / name).mkdir(parents=True)
        (root / name / "model-settings.json").write_text(json.dumps({k: v for k, v in settings.items() if v}))
        (root / name / "model.py").write_text(MODEL_PY)
        for version in versions:
            (root / name / version).mkdir()
    return str(root)


def manager(tmp_path: Path, models: Dict[str, List[str]], mode: str = "lazy",
            **limits: int) -> Tuple[RepositoryManager, Hooks]:
    hooks = Hooks()
    root = repository(tmp_path / "repo", models, tmp_path / "events.txt")
    return RepositoryManager.open(RepositoryOptions(root, mode, **limits), hooks.hooks()), hooks


def loads(tmp_path: Path) -> List[str]:
    path = tmp_path / "events.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split()[1] for line in lines if line.startswith("load")]


def test_a_request_reaches_the_version_it_names_or_the_highest(tmp_path):
    repo, _ = manager(tmp_path, {"m": ["1", "2", "10"], "plain": []})

    async def main():
        assert (await repo.acquire("m", None)).version == "10"  # 10 > 2: numbers, not text
        assert (await repo.acquire("m", "01")).version == "1"  # the same number
        assert (await repo.acquire("plain", "1")).version == ""  # a model without versions serves "1"
        with pytest.raises(ModelVersionNotFound) as info:
            await repo.acquire("m", "3")
        assert str(info.value).endswith("Model 'm' has no version '3'; versions served: 1, 2, 10.")
        repo.close()

    asyncio.run(main())


def test_the_index_lists_versions_never_loaded_without_a_state(tmp_path):
    repo, hooks = manager(tmp_path, {"m": ["1", "2"], "plain": []})
    assert repo.index() == [{"name": "m", "version": "1"}, {"name": "m", "version": "2"}, {"name": "plain"}]

    async def main():
        await repo.acquire("m", "2")
        repo.close()

    asyncio.run(main())
    assert repo.index()[1] == {"name": "m", "version": "2", "state": "READY"}
    assert hooks.defaults["m"] is hooks.served[("m", "2")]  # the highest answers requests naming none


def test_a_busy_model_is_never_evicted_and_no_room_says_why(tmp_path):
    repo, hooks = manager(tmp_path, {"a": [], "b": []}, max_loaded_models=1)

    async def main():
        a = await repo.acquire("a", None)
        repo.begin(a)  # a call of a in flight
        with pytest.raises(NoRoom) as info:
            await repo.acquire("b", None)
        assert str(info.value) == ("no room for model 'b': 1 loaded model busy or pinned (--max_loaded_models 1); "
                                   "retry later")
        repo.end(a)
        await repo.acquire("b", None)  # a is idle now: it goes
        assert a.ready is False and set(hooks.served) == {("b", "")}
        repo.close()

    asyncio.run(main())
    assert {entry["name"]: entry.get("reason") for entry in repo.index()} == {"a": "evicted to make room", "b": None}


def test_concurrent_first_requests_wait_for_one_load(tmp_path):
    repo, _ = manager(tmp_path, {"a": []})

    async def main():
        models = await asyncio.gather(*(repo.acquire("a", None) for _ in range(20)))
        assert len({id(model) for model in models}) == 1
        repo.close()

    asyncio.run(main())
    assert loads(tmp_path) == ["a"]


def test_failed_lazy_loads_back_off_doubling_to_a_ceiling(tmp_path):
    (tmp_path / "repo" / "a").mkdir(parents=True)
    (tmp_path / "repo" / "a" / "model-settings.json").write_text('{"implementation": "model.Missing"}')
    repo = RepositoryManager.open(RepositoryOptions(str(tmp_path / "repo"), "lazy"), Hooks().hooks())

    async def main():
        with pytest.raises(ModelNotReady) as info:
            await repo.acquire("a", None)
        assert "Its load failed: " in str(info.value) and "no model.py in" in str(info.value)
        assert str(info.value).endswith("; it is tried again after 1 s.") and info.value.retry_after == 1
        with pytest.raises(ModelNotReady) as info:  # within the backoff: no new load
            await repo.acquire("a", None)
        assert "Its last load failed: " in str(info.value)
        repo.close()

    asyncio.run(main())
    backoffs = []
    for _ in range(7):
        repo._note_failure("a")
        backoffs.append(repo._retry["a"][1])
    assert backoffs == [2.0, 4.0, 8.0, 16.0, MOST_BACKOFF_SECONDS, MOST_BACKOFF_SECONDS, MOST_BACKOFF_SECONDS]
