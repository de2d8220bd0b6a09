"""One record per language: all the package knows of a language, in one place.

The engine, the options, the Docker backend, the CLI's installer, the agents
and the E2B server each need to know something of a language: its kernelspec,
whether it forks, what its Docker kernel runs. Each reads a field of the
language's :class:`Language` here instead of asking ``if language == "r"``, so
a new language is one record in :data:`LANGUAGE_RECORDS` plus its tests
(``tests/engine/test_language_records.py`` holds every record to the code that
reads it, and finds any language branch left outside)::

    LANGUAGE_RECORDS[name] ─► Language
        naming      name, tag, aliases, other_names, title, kernel_title
        kernels     kernel (local), docker (argv in the image; Docker's kernelspec is
                    "<kernel>-docker"), spec_language, kernel_env
        E2B         env: the cells around run_code(envs=...)
        installing  bundled, install_hint
        can do      default, interpreter, undo, fork, cell_state, late_outputs,
                    agent_kernel, script, ipython_magic

The order of :data:`LANGUAGE_RECORDS` is the order every list of languages shows.
The names people type are resolved by :mod:`jupyter_exec.engine.languages`.
"""

from __future__ import annotations

from dataclasses import dataclass

from jupyter_exec.engine.language_env import (
    BASH_ENV,
    DENO_ENV,
    JAVA_ENV,
    PYTHON_ENV,
    R_ENV,
    EnvCells,
)

__all__ = ["LANGUAGE_RECORDS", "DockerKernel", "Language", "Script", "record_of_tag"]


@dataclass(frozen=True)
class DockerKernel:
    """How a language's kernel runs in a container (``kernels/languages/Dockerfile``)."""

    argv: tuple[str, ...]
    """Its command in the image; ``{connection_file}`` is the provisioner's."""
    display_name: str
    interrupt_mode: str
    """``signal`` or ``message`` (Deno and ipykernel stop a cell on a message)."""
    languages_image: bool = True
    """Whether it needs the languages image (else any kernel image has it: Python's)."""


@dataclass(frozen=True)
class Script:
    """How a block of the language runs as a process of its own (``run_script``)."""

    suffix: str
    program: str
    """The program that runs the file: in a container always, here unless ``own_interpreter``."""
    own_interpreter: bool = False
    """Whether here the session kernel's own interpreter runs it (its venv's Python)."""


@dataclass(frozen=True)
class Language:
    """One language: what it is called, which kernel runs it, and what it can do."""

    name: str
    """Its one name (``Session(language=...)``, ``LANGUAGES``)."""
    tag: str
    """What :func:`~jupyter_exec.engine.languages.normalise_language` gives for its code
    blocks: the name, except ``sh`` for shell blocks (the agents' fence tag)."""
    aliases: frozenset[str]
    """The fence tags and names (lowercase) that mean it, its name and tag among them."""
    title: str
    """Its name for people (``Java``)."""
    kernel: str
    """The kernelspec that runs it on this machine, as its own installer names it."""
    spec_language: str
    """The ``language`` its kernelspecs declare (Deno's says ``typescript`` for both)."""
    suffix: str
    """Its source files' suffix (an agent's block saved as a file)."""
    env: EnvCells
    """E2B's cells around ``run_code(envs=...)``, in the language itself."""
    install_hint: str
    """The command that installs its kernel."""
    kernel_title: str = ""
    """Its kernel's name for people (``JJava``)."""
    other_names: tuple[str, ...] = ()
    """Names besides ``name`` taken as they are, not as fence tags: E2B's ``language=``
    (``js``, ``ts``, ``python3``) and an agent's block language (``js``, ``ts``)."""
    docker: DockerKernel | None = None
    """Its Docker kernel (None: it has none; :attr:`no_docker_why` says why)."""
    no_docker_why: str = ""
    """Why it has no Docker kernel; ``{container}`` is the container as the caller says it."""
    kernel_env: tuple[tuple[str, str], ...] = ()
    """Set in its kernels' environment by the E2B server (Deno: no colour codes)."""
    bundled: bool = False
    """Its kernel comes with jupyter-exec: ``kernels install`` has nothing to add."""
    default: bool = False
    """What a session runs unless told: its kernel is the one a missing kernelspec falls
    back to, and the one a server's configured kernelspecs run."""
    interpreter: bool = False
    """Its kernel runs on a Python interpreter a session may choose (``python=``)."""
    undo: bool = False
    """``undo_steps`` works (undo is Python run inside the kernel)."""
    fork: bool = False
    """Its kernel can be forked (an IPython kernel's ``os.fork``)."""
    cell_state: bool = False
    """The in-kernel helpers run in it: stream guard, durable state, snapshots per cell."""
    late_outputs: bool = False
    """Its kernel may publish a cell's outputs after its idle status (Deno's)."""
    agent_kernel: bool = False
    """An agent's block of it runs in a kernel of its own beside the session's Python one."""
    script: Script | None = None
    """How its blocks run as processes (None: they cannot)."""
    ipython_magic: str = ""
    """The cell magic that runs its code in an IPython kernel (an agent's shell block)."""

    @property
    def label(self) -> str:
        """Its name and its kernel's, for people: ``R (IRkernel)``."""
        return f"{self.title} ({self.kernel_title})" if self.kernel_title else self.title

    @property
    def owns_kernel(self) -> bool:
        """Whether a kernel of :attr:`kernel`, known by name alone, is taken to run this
        language (Deno's runs TypeScript and JavaScript, and says TypeScript)."""
        return self.spec_language.lower() == self.name


_DENO_DOCKER = DockerKernel(
    ("python", "/opt/kernel/share/jupyter-exec/deno_kernel.py", "{connection_file}"),
    "Deno (Docker)",
    "message",
)


def _deno_language(
    name: str, title: str, suffix: str, short: str, aliases: frozenset[str]
) -> Language:
    """JavaScript or TypeScript: one Deno kernel runs both, so they differ only in what
    they are called and their files' suffix; the kernel's side is declared once here."""
    return Language(
        name=name,
        tag=name,
        aliases=aliases,
        title=title,
        kernel_title="Deno",
        kernel="deno",
        spec_language="typescript",
        suffix=suffix,
        env=DENO_ENV,
        install_hint=f"jupyter-exec kernels install {name}",
        other_names=(short,),
        docker=_DENO_DOCKER,
        kernel_env=(("NO_COLOR", "1"),),
        late_outputs=True,
        agent_kernel=True,
    )


def _records(*records: Language) -> dict[str, Language]:
    return {record.name: record for record in records}


LANGUAGE_RECORDS: dict[str, Language] = _records(
    Language(
        name="python",
        tag="python",
        aliases=frozenset({"python", "py", "python3", "ipython", "ipython3", "pycon"}),
        title="Python",
        kernel="python3",
        spec_language="python",
        suffix=".py",
        env=PYTHON_ENV,
        install_hint="pip install ipykernel",
        other_names=("python3",),
        docker=DockerKernel(
            ("python", "-m", "ipykernel_launcher", "-f", "{connection_file}"),
            "Python 3 (Docker)",
            "message",
            languages_image=False,
        ),
        bundled=True,
        default=True,
        interpreter=True,
        undo=True,
        fork=True,
        cell_state=True,
        script=Script(".py", "python", own_interpreter=True),
    ),
    Language(
        name="r",
        tag="r",
        aliases=frozenset({"r", "rscript", "ir"}),
        title="R",
        kernel_title="IRkernel",
        kernel="ir",
        spec_language="R",
        suffix=".r",
        env=R_ENV,
        install_hint="jupyter-exec kernels install r",
        docker=DockerKernel(
            ("R", "--slave", "-e", "IRkernel::main()", "--args", "{connection_file}"),
            "R (Docker)",
            "signal",
        ),
        agent_kernel=True,
    ),
    Language(
        name="bash",
        tag="sh",
        aliases=frozenset({"sh", "bash", "shell", "console", "zsh", "shell-session"}),
        title="bash",
        kernel_title="bash_kernel",
        kernel="bash",
        spec_language="bash",
        suffix=".sh",
        env=BASH_ENV,
        install_hint="jupyter-exec kernels install bash",
        docker=DockerKernel(
            ("python", "-m", "bash_kernel", "-f", "{connection_file}"), "Bash (Docker)", "signal"
        ),
        script=Script(".sh", "bash"),
        ipython_magic="%%bash",
    ),
    _deno_language(
        "javascript",
        "JavaScript",
        ".js",
        "js",
        frozenset({"javascript", "js", "node", "nodejs", "mjs"}),
    ),
    _deno_language(
        "typescript", "TypeScript", ".ts", "ts", frozenset({"typescript", "ts", "deno", "tsx"})
    ),
    Language(
        name="java",
        tag="java",
        aliases=frozenset({"java", "jshell", "jjava"}),
        title="Java",
        kernel_title="JJava",
        kernel="java",
        spec_language="java",
        suffix=".java",
        env=JAVA_ENV,
        install_hint="jupyter-exec kernels install java",
        no_docker_why="JJava speaks TCP, which {container} does not have",
        agent_kernel=True,
    ),
)
"""Every language, by name, in the order lists show them."""

_BY_TAG = {record.tag: record for record in LANGUAGE_RECORDS.values()}


def record_of_tag(tag: str) -> Language | None:
    """The language of a code block's ``tag`` exactly as
    :func:`~jupyter_exec.engine.languages.normalise_language` gives it (``sh``: bash)."""
    return _BY_TAG.get(tag)
