"""The languages a sandbox runs: E2B's names for them, their kernels, and ``envs=`` in each.

E2B's ``run_code(language=...)`` and ``create_code_context(language=...)``
take a language name (``"r"``, ``"js"``, ``"ts"``, ``"bash"``...). A client
names a *language*, never a kernelspec: the name goes through
:data:`LANGUAGES`, a fixed table, so nothing a client sends can pick another
kernel (or a path). Each language has a default context, a stateful kernel
started on its first use, as E2B's sandboxes have.

``run_code(envs=...)`` sets variables for one execution only; each kernel
speaks its own language, so each gets its own two cells around the code: one
that saves the old values and sets the new, one that puts the old back
(each language's record holds its two: :mod:`jupyter_exec.engine.language_env`). The
values are written as string literals of that language (JSON's literals are
R's and JavaScript's; bash gets ``shlex`` quoting), never spliced in raw.

Every language of :data:`~jupyter_exec.engine.language_records.LANGUAGE_RECORDS` is
served (Python, R, JavaScript/TypeScript on Deno, bash, Java on JJava), on its local
kernelspec. A JVM
cannot change its own environment, so for Java, as in E2B's Java kernel, both the
sandbox's ``envs`` and ``run_code(envs=...)`` are system properties
(``System.getProperty``); JSON's string literals are Java's too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jupyter_exec.docker.image import LANGUAGES_IMAGE
from jupyter_exec.engine.language_records import LANGUAGE_RECORDS
from jupyter_exec.engine.language_records import Language as LanguageRecord
from jupyter_exec.exceptions import InvalidArgument

__all__ = [
    "LANGUAGES",
    "Language",
    "check_installed",
    "installed",
    "language_named",
    "refuse_language",
]


@dataclass(frozen=True)
class Language:
    """One language a sandbox runs: its E2B name, its kernelspec, its label for people.

    What it is beyond those is its record's
    (:data:`~jupyter_exec.engine.language_records.LANGUAGE_RECORDS`), the cells around
    ``run_code(envs=...)`` among them."""

    name: str
    kernel_name: str
    label: str
    kernel_env: dict[str, str] = field(default_factory=dict)
    """Set in its kernels' environment (Deno: no colour codes in the results' text)."""

    @classmethod
    def of(cls, record: LanguageRecord) -> Language:
        """The sandbox's language for ``record``: its local kernelspec, its label."""
        return cls(record.name, record.kernel, record.label, dict(record.kernel_env))

    @property
    def record(self) -> LanguageRecord:
        """Everything else the package knows of this language."""
        return LANGUAGE_RECORDS[self.name]

    def set_env_code(self, env_vars: dict[str, str]) -> str:
        """The cell that keeps the old values of ``env_vars`` and sets the new ones."""
        return self.record.env.set_code(env_vars)

    def restore_env_code(self, env_vars: dict[str, str]) -> str:
        """The cell that puts back what :meth:`set_env_code` kept."""
        return self.record.env.restore_code(env_vars)

    def startup_code(self, envs: dict[str, str]) -> str | None:
        """A first cell for a new kernel given the sandbox's ``envs``: Java reads them as
        system properties, as in E2B's Java kernel (the others read its environment)."""
        return self.record.env.startup_code(envs)

    def check_env(self, env_vars: dict[str, str]) -> None:
        """Refuse names this language cannot set safely (bash: identifiers only)."""
        self.record.env.check(env_vars)


_SERVED = {name: Language.of(record) for name, record in LANGUAGE_RECORDS.items()}
PYTHON = _SERVED["python"]

LANGUAGES: dict[str, Language] = {
    word: language
    for name, language in _SERVED.items()
    for word in (name, *LANGUAGE_RECORDS[name].other_names)
}
"""E2B's language names -> the language. The one place a client's word picks a kernel."""

DEFAULT_LISTED = ("python", "javascript")
"""The default contexts E2B lists in every sandbox, started or not."""

_REFUSED: dict[str, str] = {}


def language_named(name: object) -> Language:
    """The language a client means by ``name`` (None: Python); anything else is refused."""
    if name is None:
        return PYTHON
    if not isinstance(name, str):
        raise InvalidArgument("'language' must be a string, such as 'python' or 'r'")
    found = LANGUAGES.get(name.strip().lower())
    if found is not None:
        return found
    served = ", ".join(sorted(LANGUAGES))
    why = _REFUSED.get(name.strip().lower())
    reason = f": {why}" if why else ""
    raise InvalidArgument(
        f"this sandbox does not run {name[:40]!r}{reason}; it runs {served}. For shell "
        "commands there is also sandbox.commands.run(...)"
    )


def refuse_language(language: object, backend: str = "local", image: str | None = None) -> Language:
    """The language a client asks for, if this sandbox's backend can run it; else refused.

    A Docker sandbox runs another language's kernel in the languages image
    (:data:`~jupyter_exec.docker.image.LANGUAGES_IMAGE`) unless the server names an image
    of its own, which has Python only as far as we know; Java has no Docker kernel."""
    found = language_named(language)
    docker = found.record.docker
    if backend == "local" or (docker is not None and not docker.languages_image):
        return found
    if backend == "docker" and docker is None:
        why = found.record.no_docker_why.format(container="a sandbox's network-less container")
        raise InvalidArgument(
            f"{found.record.title} has no Docker kernel ({why}): use a local sandbox for "
            f"language={found.name!r}"
        )
    if backend != "docker" or image not in (None, LANGUAGES_IMAGE):
        where = f"image {image!r}" if image else f"{backend!r} backend"
        raise InvalidArgument(
            f"this sandbox's kernels run on the {where}, which has Python only for "
            f"{found.label}: it runs in a local sandbox, or a Docker one on the languages image"
        )
    return found


def installed(found: Language, backend: str = "local") -> bool:
    """Whether ``found``'s kernel is here: its kernelspec on this machine (its name looked up,
    nothing parsed), or, for a Docker sandbox, in the languages image (checked at start)."""
    from jupyter_client.kernelspec import KernelSpecManager

    if found.record.bundled or backend == "docker":
        return True
    return found.kernel_name in KernelSpecManager().find_kernel_specs()


def check_installed(found: Language, backend: str = "local") -> None:
    """Refuse a language whose kernelspec this server does not have, naming what to install."""
    if not installed(found, backend):
        raise InvalidArgument(
            f"{found.label} is not installed on this server (no kernelspec "
            f"{found.kernel_name!r}); install its kernel (jupyter-exec kernels install "
            f"{found.name}) to use language={found.name!r}"
        )
