"""The build backend: setuptools, after the JupyterLab extension's TypeScript build.

``pip install .``, ``pip install git+...``, ``pip install -e .`` and ``python -m build`` call
these PEP 517 hooks (``pyproject.toml``: ``backend-path``). Each hook that makes a distribution
first builds the sessions panel (``build_labextension.py``: only when its sources changed), then
hands over to setuptools, whose ``setup.cfg`` installs the result as
``share/jupyter/labextensions/jupyter-exec``. This is what jupyterlab/extension-template does with
hatch-jupyter-builder's build hook, kept on setuptools so that ``setup.cfg`` stays the one place
of the package's metadata.

Without Node.js the build stops with a message saying what to install.
``JUPYTER_EXEC_SKIP_LABEXTENSION=1`` (or ``SKIP_JUPYTER_BUILDER=1``, the variable Jupyter's own
build hook reads) builds the package without the panel: for the documentation, or an
environment that never runs JupyterLab.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from build_labextension import LabextensionBuildError, build_labextension, say
from setuptools import build_meta as _setuptools

SKIP_VARIABLES = ("JUPYTER_EXEC_SKIP_LABEXTENSION", "SKIP_JUPYTER_BUILDER")

get_requires_for_build_wheel = _setuptools.get_requires_for_build_wheel
get_requires_for_build_sdist = _setuptools.get_requires_for_build_sdist
get_requires_for_build_editable = _setuptools.get_requires_for_build_editable
prepare_metadata_for_build_wheel = _setuptools.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = _setuptools.prepare_metadata_for_build_editable


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _build_unless_skipped()
    return str(_setuptools.build_wheel(wheel_directory, config_settings, metadata_directory))


def build_editable(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _build_unless_skipped()
    return str(_setuptools.build_editable(wheel_directory, config_settings, metadata_directory))


def build_sdist(sdist_directory: str, config_settings: Mapping[str, Any] | None = None) -> str:
    # The sdist carries the built extension beside its sources: installing it (from PyPI, say)
    # needs no Node, since that output is newer than its sources and nothing is rebuilt.
    _build_unless_skipped()
    return str(_setuptools.build_sdist(sdist_directory, config_settings))


def _build_unless_skipped() -> None:
    skip = next((name for name in SKIP_VARIABLES if os.environ.get(name, "") not in ("", "0")), "")
    if skip:
        say(f"{skip} is set: building without the JupyterLab extension")
        return
    try:
        build_labextension()
    except LabextensionBuildError as error:
        # A message, not a traceback: pip shows the build's output, which ends with it.
        raise SystemExit(f"jupyter-exec: ERROR: {error}") from None
