"""A script serving a model of its own, ``own``; given ``--model_repository DIR`` it serves the repository's
models beside it."""
from kserve_sdk import Model, ModelServer


class Own(Model):
    """Says it is the script's."""

    def load(self) -> bool:
        self.ready = True
        return True

    def predict(self, payload, headers=None):
        return {"predictions": ["the script's own"]}


if __name__ == "__main__":
    model = Own("own")
    model.load()
    ModelServer().start([model])
