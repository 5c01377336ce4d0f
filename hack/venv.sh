# Sourced by serve.sh and test.sh: create .venv with Python 3.11 and install the package (editable)
# with the extras named in $EXTRAS. A second run installs again only when setup.cfg, pyproject.toml or the
# extras asked for have changed since the last install that succeeded (its stamp is kept in .venv).
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
"$PY" -c 'import sys; assert sys.version_info[:2] >= (3, 11), "Python 3.11 is required"'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
SPEC="."
[ -n "${EXTRAS:-}" ] && SPEC=".[${EXTRAS}]"
STAMP=".venv/.kserve-sdk-installed-${EXTRAS:-none}"
WANT="$(cat setup.cfg pyproject.toml compat/kserve/pyproject.toml | .venv/bin/python -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$SPEC"
  # the tests run unchanged KServe scripts with `python model.py`: `import kserve` from compat/kserve
  case ",${EXTRAS:-}," in *,test,*) .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ./compat/kserve ;; esac
  echo "$WANT" > "$STAMP"
fi
