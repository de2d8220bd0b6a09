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
echo "installing jupyter-exec[${EXTRAS}] into .venv" >&2
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[${EXTRAS}]" 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
.venv/bin/python -c "import jupyter_exec" || { echo "install failed" >&2; exit 1; }
# An editable install skips the package's data files, among them the file that enables the
# server extension; install that one file where a wheel would put it, so `jupyter server` in
# .venv loads the extension exactly as for a user who ran `pip install jupyter-exec`.
install -D -m 0644 server_extension/jupyter_server_config.d/jupyter_exec.json \
  .venv/etc/jupyter/jupyter_server_config.d/jupyter_exec.json
# The JupyterLab extension (the sessions panel): built from its TypeScript sources when they
# changed, and linked where a wheel installs it, so JupyterLab in .venv loads it, and loads a
# rebuild without a reinstall. Without npm it is skipped (LABEXTENSION=required: an error).
if command -v npm >/dev/null; then
  scripts/build-labextension
elif [ "${LABEXTENSION:-}" = required ]; then
  echo "npm is needed to build the JupyterLab extension (install Node >= 18)" >&2
  exit 1
else
  echo "note: no npm, so the JupyterLab extension is not built (scripts/build-labextension)" >&2
fi
if [ -f jupyter_exec/labextension/package.json ]; then
  LABEXT=.venv/share/jupyter/labextensions/jupyter-exec
  [ -L "$LABEXT" ] || rm -rf "$LABEXT"
  mkdir -p "$(dirname "$LABEXT")"
  ln -sfn "$ROOT/jupyter_exec/labextension" "$LABEXT"
fi
