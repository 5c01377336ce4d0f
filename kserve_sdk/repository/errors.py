"""What goes wrong in a model repository, said in one line naming the file or folder to fix."""


class RepositoryError(ValueError):
    """A model repository holds something the server cannot serve: a malformed ``model-settings.json``, an
    unknown ``implementation``, a ``model.py`` that raises at import, ... The message is one line that names
    the file (or folder) and the problem."""

    def __init__(self, where: str, problem: str):
        self.where = where
        self.problem = " ".join(problem.split())  # one line, whatever the cause's text held
        super().__init__(f"{where}: {self.problem}")


def first_line(error: BaseException) -> str:
    """An exception as a log line says it: its type and the first line of its message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
