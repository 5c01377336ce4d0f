"""Running the server: ``--workers`` processes (``workers.py``), start-up failures told in one line
(``startup.py``), TLS that follows its files (``tls.py``) and the ``import kserve`` alias (``import_alias.py``)."""
