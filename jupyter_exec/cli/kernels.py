"""``jupyter-exec kernels install|list``: the kernels of every language a session runs.

Each language's kernel comes from a package registry through its own installer, into
this Python environment (``sys.prefix``, as ipykernel's ``--sys-prefix``) by default,
or the user's Jupyter dir (``--user``) or a ``--prefix``::

    bash                    pip install bash_kernel (this interpreter), then
                            python -m bash_kernel.install --sys-prefix
    r                       Debian's r-base-core and r-cran-irkernel (apt-get, when this
                            user may), then IRkernel::installspec(prefix=...) via Rscript
    javascript, typescript  pip install deno (the binary), then deno jupyter --install;
                            Deno writes its kernelspec into the user's home only, so it
                            is written into a scratch home and moved where it belongs
    java                    a JDK from Debian (default-jdk-headless, when missing), then
                            pip install --pre jjava: its wheel carries the kernelspec

Without a language, ``kernels install`` installs jupyter-exec's own Docker kernelspecs
("Python 3 (Docker)"), as it always did.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from jupyter_exec.cli.commands import Command
from jupyter_exec.engine.language_records import LANGUAGE_RECORDS
from jupyter_exec.engine.languages import (
    LANGUAGE_KERNELS,
    LANGUAGES,
    canonical_language,
    language_record,
)
from jupyter_exec.exceptions import InvalidArgument, MissingDependency

__all__ = [
    "KERNELS_COMMAND",
    "install_docker_kernelspecs",
    "install_language",
    "kernel_locations",
]

R_PACKAGES = ("r-base-core", "r-cran-irkernel")
"""Debian's packages for R and its Jupyter kernel."""
JDK_PACKAGE = "default-jdk-headless"
"""Debian's JDK, for Java's kernel (JJava runs cells with the JDK's jshell)."""

KERNELS_EPILOG = """\
examples:
  jupyter-exec kernels install r bash javascript typescript
      the kernels of those languages, into this Python environment (sys.prefix)
  jupyter-exec kernels install bash --user
      for you only (~/.local/share/jupyter/kernels)
  jupyter-exec kernels install --sys-prefix
      jupyter-exec's Docker kernelspec ("Python 3 (Docker)") for JupyterLab
  jupyter-exec kernels list
      every language, its kernelspec and where it is installed
Then Session(language="r") (or --language r) runs R. Tune the Docker kernelspec in
jupyter_server_config.py, e.g. c.DockerProvisioner.memory = "4g"
"""


def _kernels_arguments(parser: argparse.ArgumentParser) -> None:
    """The actions of ``jupyter-exec kernels``: ``install [LANGUAGE...]`` and ``list``."""
    actions = parser.add_subparsers(dest="kernels_command", metavar="COMMAND")
    actions.required = True
    INSTALL_COMMAND.register(actions)
    LIST_COMMAND.register(actions)


def _install_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``jupyter-exec kernels install``."""
    parser.add_argument(
        "languages",
        nargs="*",
        metavar="LANGUAGE",
        help=f"any of {', '.join(r.name for r in LANGUAGE_RECORDS.values() if not r.bundled)}",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for the current user")
    where.add_argument(
        "--sys-prefix",
        action="store_true",
        help=f"install into {sys.prefix} (this environment; the default for languages)",
    )
    where.add_argument("--prefix", metavar="PREFIX", help="install into PREFIX/share/jupyter")


def _install(args: argparse.Namespace) -> int:
    if not args.languages:
        return install_docker_kernelspecs(args)
    languages = list(dict.fromkeys(canonical_language(name) for name in args.languages))
    prefix = None if args.user else (args.prefix or sys.prefix)
    done: set[str] = set()
    for language in languages:
        kernel = LANGUAGE_KERNELS[language]
        if kernel in done:
            continue
        where = install_language(language, user=args.user, prefix=prefix)
        done.add(kernel)
        print(f"installed the {language} kernel (kernelspec {kernel!r}) in {where}", flush=True)
    return 0


def install_docker_kernelspecs(args: argparse.Namespace) -> int:
    """``kernels install`` without a language: jupyter-exec's Docker kernelspecs."""
    from jupyter_client.kernelspec import KernelSpecManager

    from jupyter_exec.docker.resources import kernelspec_dirs

    prefix = args.prefix or (sys.prefix if args.sys_prefix else None)
    manager = KernelSpecManager()
    try:
        for source in kernelspec_dirs():
            dest = manager.install_kernel_spec(
                str(source), kernel_name=source.name, user=args.user, prefix=prefix
            )
            print(f"installed kernelspec {source.name} in {dest}")
    except OSError as exc:
        raise InvalidArgument(
            f"cannot install the kernelspecs there: {exc.strerror or exc} (try --user)"
        ) from None
    return 0


def install_language(language: str, *, user: bool, prefix: str | None) -> Path:
    """Install ``language``'s kernel and its kernelspec; the kernelspec's folder."""
    record = language_record(language)
    if record.bundled:
        raise InvalidArgument(
            "Python's kernel (ipykernel) comes with jupyter-exec; name r, bash, javascript "
            "or typescript"
        )
    _INSTALLERS[record.kernel](user=user, prefix=prefix)
    return _installed_at(record.kernel, user=user, prefix=prefix)


def _run(argv: Sequence[str], what: str, env: dict[str, str] | None = None) -> None:
    print("$ " + " ".join(argv), flush=True)
    try:
        done = subprocess.run(list(argv), env=env, check=False)
    except OSError as exc:
        raise MissingDependency(f"{what}: cannot run {argv[0]}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        raise MissingDependency(f"{what} failed: {' '.join(argv)} exited {done.returncode}")


def _pip(package: str, module: str) -> None:
    """``pip install package`` into this interpreter, unless ``module`` imports already."""
    if importlib.util.find_spec(module) is None:
        pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", package]
        _run(pip, f"pip install {package}")


def _env_with_this_python() -> dict[str, str]:
    """This environment's scripts first on PATH (``jupyter`` for IRkernel's installspec)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _has_irkernel() -> bool:
    if shutil.which("Rscript") is None:
        return False
    probe = [
        "Rscript",
        "-e",
        "quit(status = if (requireNamespace('IRkernel', quietly=TRUE)) 0 else 1)",
    ]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def _install_r(*, user: bool, prefix: str | None) -> None:
    if not _has_irkernel():
        apt = shutil.which("apt-get")
        packages = " ".join(R_PACKAGES)
        if apt is None:
            raise MissingDependency(
                "R's kernel needs R and the IRkernel package, which this system has no apt-get "
                "to install: install R, then IRkernel (in R: install.packages('IRkernel')), "
                "and run this again"
            )
        if os.geteuid() != 0:
            raise MissingDependency(
                f"R's kernel comes from Debian: run `sudo apt-get install -y {packages}`, "
                "then this again"
            )
        quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run([apt, "install", "-y", "--no-install-recommends", *R_PACKAGES], "apt-get", quiet)
    where = "user = TRUE" if user else f"user = FALSE, prefix = {json.dumps(prefix)}"
    _run(
        ["Rscript", "-e", f"IRkernel::installspec({where}, name = 'ir', displayname = 'R')"],
        "IRkernel::installspec",
        _env_with_this_python(),
    )


def _install_bash(*, user: bool, prefix: str | None) -> None:
    """bash_kernel's own installer, into a scratch prefix; its kernelspec then goes where
    it belongs, without the top-level ``codemirror_mode`` it adds (not a kernelspec field:
    jupyter_client warns on every start)."""
    _pip("bash_kernel", "bash_kernel")
    with tempfile.TemporaryDirectory(prefix="jx-bash-") as scratch:
        _run(
            [sys.executable, "-m", "bash_kernel.install", "--prefix", scratch],
            "python -m bash_kernel.install",
        )
        written = Path(scratch, "share", "jupyter", "kernels", "bash")
        _install_spec(written, "bash", user=user, prefix=prefix, drop=("codemirror_mode",))


def _install_spec(
    written: Path,
    name: str,
    *,
    user: bool,
    prefix: str | None,
    drop: Sequence[str] = (),
    interrupt_mode: str | None = None,
) -> None:
    """Install the kernelspec an installer wrote to ``written`` as ``name``, adjusted."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec_file = written / "kernel.json"
    if not spec_file.is_file():
        raise MissingDependency(f"the {name} installer wrote no kernelspec in {written}")
    spec = json.loads(spec_file.read_text())
    for key in drop:
        spec.pop(key, None)
    if interrupt_mode is not None:
        spec["interrupt_mode"] = interrupt_mode
    spec_file.write_text(json.dumps(spec, indent=1))
    KernelSpecManager().install_kernel_spec(
        str(written), kernel_name=name, user=user, prefix=prefix, replace=True
    )


def _install_java(*, user: bool, prefix: str | None) -> None:
    """JJava from PyPI (its wheel carries the kernel's jars and kernelspec, installed into
    this environment), on a JDK from Debian (its ``jdk.jshell`` module runs the cells)."""
    if not _has_jshell():
        apt = shutil.which("apt-get")
        if apt is None or os.geteuid() != 0:
            raise MissingDependency(
                "Java's kernel needs a JDK (java with the jdk.jshell module): install one "
                f"(e.g. `sudo apt-get install -y {JDK_PACKAGE}`), then run this again"
            )
        quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run([apt, "install", "-y", "--no-install-recommends", JDK_PACKAGE], "apt-get", quiet)
    if importlib.util.find_spec("jjava") is None:
        pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--pre"]
        _run([*pip, "jjava"], "pip install jjava")
    shipped = Path(sys.prefix, "share", "jupyter", "kernels", "java")
    if Path(prefix or "") == Path(sys.prefix) and not user:
        if not (shipped / "kernel.json").is_file():
            raise MissingDependency(f"jjava is installed but its kernelspec is not in {shipped}")
        return
    with tempfile.TemporaryDirectory(prefix="jx-java-") as scratch:  # the jars go along
        copy = Path(scratch, "java")
        shutil.copytree(shipped, copy)
        _install_spec(copy, "java", user=user, prefix=prefix)


def _has_jshell() -> bool:
    java = shutil.which("java")
    if java is None:
        return False
    modules = subprocess.run([java, "--list-modules"], capture_output=True, text=True, check=False)
    return "jdk.jshell" in modules.stdout


def _install_deno(*, user: bool, prefix: str | None) -> None:
    _pip("deno", "deno")
    deno_bin = subprocess.run(
        [sys.executable, "-c", "import deno; print(deno.find_deno_bin())"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if not deno_bin or not Path(deno_bin).is_file():
        raise MissingDependency("the deno package is installed but its binary was not found")

    with tempfile.TemporaryDirectory(prefix="jx-deno-") as home:
        env = {**os.environ, "HOME": home, "DENO_NO_UPDATE_CHECK": "1"}
        _run([deno_bin, "jupyter", "--install", "--force"], "deno jupyter --install", env)
        written = Path(home, ".local", "share", "jupyter", "kernels", "deno")
        # Deno stops a running cell on an interrupt_request; a SIGINT ends the whole kernel.
        _install_spec(written, "deno", user=user, prefix=prefix, interrupt_mode="message")


class _Installer(Protocol):
    def __call__(self, *, user: bool, prefix: str | None) -> None: ...


_INSTALLERS: dict[str, _Installer] = {
    "ir": _install_r,
    "bash": _install_bash,
    "deno": _install_deno,
    "java": _install_java,
}
"""Each kernelspec's installer, by the kernelspec's name (a language's record names its
kernel; JavaScript and TypeScript share Deno's)."""


def _installed_at(kernel: str, *, user: bool, prefix: str | None) -> Path:
    """Where ``kernel``'s kernelspec was installed: the user's Jupyter dir or the prefix's."""
    from jupyter_core.paths import jupyter_data_dir

    base = Path(jupyter_data_dir()) if user else Path(prefix or sys.prefix, "share", "jupyter")
    return base / "kernels" / kernel


def kernel_locations(specs: dict[str, str]) -> dict[str, str]:
    """Of installed kernelspecs (name -> folder), the languages' ones."""
    return {name: folder for name, folder in specs.items() if name in LANGUAGE_KERNELS.values()}


def _list(args: argparse.Namespace) -> int:
    from jupyter_client.kernelspec import KernelSpecManager

    from jupyter_exec.docker.resources import kernelspec_dirs

    installed = KernelSpecManager().find_kernel_specs()
    for language in LANGUAGES:
        kernel = LANGUAGE_KERNELS[language]
        where = installed.get(kernel) or f"not installed: jupyter-exec kernels install {language}"
        print(f"{language}\t{kernel}\t{where}")
    for source in kernelspec_dirs():
        spec = json.loads((source / "kernel.json").read_text())
        print(f"{source.name}\t{spec.get('display_name', '')}\t{source}")
    return 0


INSTALL_COMMAND = Command(
    "install",
    help="install languages' kernels (or, with none named, the Docker kernelspec)",
    epilog=KERNELS_EPILOG,
    arguments=_install_arguments,
    run=_install,
)

LIST_COMMAND = Command(
    "list", help="list each language's kernel and jupyter-exec's kernelspecs", run=_list
)

KERNELS_COMMAND = Command(
    "kernels",
    help="install the kernels of R, Bash, JavaScript/TypeScript, or the Docker kernelspec",
    description="Install and list kernels: each language's, and jupyter-exec's own.",
    epilog=KERNELS_EPILOG,
    arguments=_kernels_arguments,
)
