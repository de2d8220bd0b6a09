# Sourced by the scripts in this folder: make ./.venv with the project installed.
# EXTRAS selects the optional parts (default: what the scripts need).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $($PYTHON --version)" >&2
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
# The install builds the JupyterLab extension (the sessions panel) from its TypeScript sources
# when they changed (server_extension/build_backend.py; Node >= 18 and npm). Without npm it is
# skipped, with a note (LABEXTENSION=required: the install fails and says what to install).
if ! command -v npm >/dev/null && [ "${LABEXTENSION:-}" != required ]; then
  echo "note: no npm, so the JupyterLab extension is not built (install Node >= 18 and npm)" >&2
  export JUPYTER_EXEC_SKIP_LABEXTENSION=1
fi
echo "installing jupyter-exec[${EXTRAS}] into .venv" >&2
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[${EXTRAS}]" 2>&1 \
  | { grep -v "is ignored: it is neither a file nor a directory" >&2 || true; } \
  || { echo "install failed" >&2; exit 1; }
.venv/bin/python -c "import jupyter_exec" || { echo "install failed" >&2; exit 1; }
# An editable install skips the package's data files, among them the file that enables the
# server extension; install that one file where a wheel would put it, so `jupyter server` in
# .venv loads the extension exactly as for a user who ran `pip install jupyter-exec`.
install -D -m 0644 server_extension/jupyter_server_config.d/jupyter_exec.json \
  .venv/etc/jupyter/jupyter_server_config.d/jupyter_exec.json
# Likewise the built JupyterLab extension: linked where a wheel installs it, so JupyterLab in
# .venv loads it, and loads a rebuild (scripts/build-labextension) without a reinstall.
if [ -f jupyter_exec/labextension/package.json ]; then
  LABEXT=.venv/share/jupyter/labextensions/jupyter-exec
  [ -L "$LABEXT" ] || rm -rf "$LABEXT"
  mkdir -p "$(dirname "$LABEXT")"
  ln -sfn "$ROOT/jupyter_exec/labextension" "$LABEXT"
fi
