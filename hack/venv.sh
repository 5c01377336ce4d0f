# Sourced by serve.sh and test.sh: create .venv with Python 3.11 and install the package (editable)
# with the extras named in $EXTRAS. A second run only checks what is installed.
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
"$PY" -c 'import sys; assert sys.version_info[:2] >= (3, 11), "Python 3.11 is required"'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
SPEC="."
[ -n "${EXTRAS:-}" ] && SPEC=".[${EXTRAS}]"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$SPEC"
