"""Build the kernel image through the ``docker`` SDK, streaming the build log as it happens.

The image is ``kernels/docker/Dockerfile``: ipykernel in a venv at ``/opt/kernel`` on top of
``BASE_IMAGE``. The options mirror AG2's ``DockerPythonEnvironment``: extra pip packages, a
requirements file, a user Dockerfile (built first, then used as the base so the kernel layer
still guarantees ipykernel), and a named image. Images built with extra content get a tag derived
from a hash of that content, so the same options reuse the same image instead of rebuilding.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_exec.docker.resources import dockerfile_dir
from jupyter_exec.engine.language_records import LANGUAGE_RECORDS
from jupyter_exec.exceptions import ImageError, InvalidArgument

if TYPE_CHECKING:  # the Docker SDK is loaded by the calls that talk to an engine, not by the
    import docker  # names (the command line shows DEFAULT_BASE_IMAGE without it)

__all__ = [
    "DEFAULT_BASE_IMAGE",
    "DEFAULT_IMAGE",
    "LANGUAGES_IMAGE",
    "BuildOptions",
    "build_image",
    "ensure_image",
    "image_exists",
    "image_languages",
]

DEFAULT_IMAGE = "jupyter-exec/kernel:latest"
DEFAULT_BASE_IMAGE = "python:3.12-slim"
LANGUAGES_IMAGE = "jupyter-exec/kernel:languages"
"""The kernel image with every other language's kernel (R, Bash, Deno) added."""
IMAGE_LANGUAGES = tuple(
    record.name
    for record in LANGUAGE_RECORDS.values()
    if record.docker is not None and record.docker.languages_image
)
"""The languages whose kernels ``kernels/languages/Dockerfile`` can add (their records say
so: ``docker.languages_image``)."""

LineSink = Callable[[str], None]


@dataclass(frozen=True)
class BuildOptions:
    """What goes into a kernel image."""

    tag: str = ""
    base_image: str = DEFAULT_BASE_IMAGE
    pip_packages: tuple[str, ...] = ()
    requirements_file: str = ""
    dockerfile: str = ""
    data_stack: bool = True
    languages: tuple[str, ...] = ()
    """Kernels added on top (``kernels/languages/Dockerfile``): any of :data:`IMAGE_LANGUAGES`."""

    @property
    def customised(self) -> bool:
        """True if the image content differs from the default kernel image's."""
        return bool(
            self.pip_packages or self.requirements_file or self.dockerfile or not self.data_stack
        )

    def resolved_tag(self) -> str:
        """The explicit tag, the default one, or ``jupyter-exec/kernel:custom-<hash>``.

        The base image does not change the default tag: CI builds the default image from a
        local base, and kernels must find it under the usual name.
        """
        if self.tag:
            return self.tag
        if self.languages and not self.customised:
            if set(self.languages) == set(IMAGE_LANGUAGES):
                return LANGUAGES_IMAGE
            return f"jupyter-exec/kernel:languages-{'-'.join(self.languages)}"
        if not self.customised and not self.languages:
            return DEFAULT_IMAGE
        return f"jupyter-exec/kernel:custom-{self.content_hash()}"

    def python_layer(self) -> BuildOptions:
        """These options without the languages: the image the languages are added to."""
        return BuildOptions(
            base_image=self.base_image,
            pip_packages=self.pip_packages,
            requirements_file=self.requirements_file,
            dockerfile=self.dockerfile,
            data_stack=self.data_stack,
        )

    def content_hash(self) -> str:
        digest = hashlib.sha256()
        parts: dict[str, Any] = {
            "base": self.base_image,
            "pip": list(self.pip_packages),
            "stack": self.data_stack,
            "ours": (dockerfile_dir() / "Dockerfile").read_text(),
            "requirements": _read(self.requirements_file),
            "dockerfile": _read(self.dockerfile),
        }
        if self.languages:  # (absent otherwise: the tags of images without them stay)
            parts["languages"] = list(self.languages)
            parts["languages_files"] = [
                (_languages_dir() / name).read_text() for name in ("Dockerfile", "deno_kernel.py")
            ]
        digest.update(json.dumps(parts, sort_keys=True).encode())
        return digest.hexdigest()[:12]


def image_languages(text: str) -> tuple[str, ...]:
    """``"r,bash,js"`` as the languages of :data:`IMAGE_LANGUAGES`, in their order; a name
    that is not one of them (python is always there) raises :class:`InvalidArgument`."""
    from jupyter_exec.engine.languages import canonical_language

    asked = {canonical_language(word) for word in text.replace(" ", ",").split(",") if word}
    asked.discard("python")
    if not asked <= set(IMAGE_LANGUAGES):
        raise InvalidArgument(
            f"no Docker kernel for {', '.join(sorted(asked - set(IMAGE_LANGUAGES)))} yet: "
            f"the image can add {', '.join(IMAGE_LANGUAGES)}"
        )
    return tuple(language for language in IMAGE_LANGUAGES if language in asked)


def _languages_dir() -> Path:
    return dockerfile_dir().parent / "languages"


def _read(path: str) -> str:
    if not path:
        return ""
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ImageError(f"cannot read {path}: {exc.strerror}") from exc


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    """True if ``tag`` names a local image."""
    from jupyter_exec.docker.engine import docker_errors

    try:
        with docker_errors(f"looking up image {tag}"):
            client.images.get(tag)
    except ImageError:
        return False
    return True


def _stream_build(client: docker.DockerClient, on_line: LineSink, what: str, **kwargs: Any) -> str:
    """Run one ``build`` call, forwarding its log; return the image id."""
    from jupyter_exec.docker.engine import docker_errors

    tail: deque[str] = deque(maxlen=30)
    image_id = ""
    with docker_errors(f"building {what}"):
        chunks: Iterable[dict[str, Any]] = client.api.build(
            rm=True, forcerm=True, decode=True, pull=False, **kwargs
        )
        for chunk in chunks:
            if "stream" in chunk:
                for line in str(chunk["stream"]).splitlines():
                    if line.strip():
                        tail.append(line)
                        on_line(line)
            elif "status" in chunk:
                line = f"{chunk.get('id', '')} {chunk['status']}".strip()
                tail.append(line)
                on_line(line)
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = str(chunk["aux"]["ID"])
            if "error" in chunk or "errorDetail" in chunk:
                message = chunk.get("error") or chunk["errorDetail"].get("message", "")
                raise ImageError(f"building {what} failed: {message}", "\n".join(tail))
    return image_id


def build_image(
    client: docker.DockerClient, options: BuildOptions, on_line: LineSink = print
) -> str:
    """Build the kernel image described by ``options``; return its tag.

    With languages, the Python kernel image is built (or reused, when it exists) first
    and the languages' kernels go on top of it, so the two share its layers."""
    if not options.languages:
        return _build_python_image(client, options, on_line)
    unknown = set(options.languages) - set(IMAGE_LANGUAGES)
    if unknown:
        raise InvalidArgument(
            f"no kernel image for {', '.join(sorted(unknown))}: use {', '.join(IMAGE_LANGUAGES)}"
        )
    tag = options.resolved_tag()
    started = time.monotonic()
    base_options = options.python_layer()
    base = base_options.resolved_tag()
    if not image_exists(client, base):
        _build_python_image(client, base_options, on_line)
    on_line(f"adding the {', '.join(options.languages)} kernels to {base} as {tag}")
    _stream_build(
        client,
        on_line,
        f"kernel image {tag}",
        path=str(_languages_dir()),
        tag=tag,
        buildargs={"BASE_IMAGE": base, "LANGUAGES": " ".join(options.languages)},
    )
    on_line(f"built {tag} in {time.monotonic() - started:.0f} s")
    return tag


def _build_python_image(
    client: docker.DockerClient, options: BuildOptions, on_line: LineSink
) -> str:
    tag = options.resolved_tag()
    started = time.monotonic()
    base = options.base_image
    if options.dockerfile:
        user_file = Path(options.dockerfile).resolve()  # trusted origin: the person's option
        if not user_file.is_file():
            raise ImageError(f"Dockerfile {options.dockerfile} does not exist")
        base = f"jupyter-exec/user-base:{options.content_hash()}"
        on_line(f"building your Dockerfile {user_file} as {base}")
        _stream_build(
            client,
            on_line,
            f"your Dockerfile {user_file}",
            path=str(user_file.parent),
            dockerfile=user_file.name,
            tag=base,
        )
    with tempfile.TemporaryDirectory(prefix="jx-build-") as context:
        shutil.copy(dockerfile_dir() / "Dockerfile", Path(context) / "Dockerfile")
        requirements = options.requirements_file or str(dockerfile_dir() / "requirements.txt")
        try:
            shutil.copy(requirements, Path(context) / "requirements.txt")
        except OSError as exc:
            raise ImageError(f"cannot read requirements file {requirements}: {exc}") from exc
        build_args = {
            "BASE_IMAGE": base,
            "DATA_STACK": "1" if options.data_stack else "0",
            "PIP_PACKAGES": " ".join(options.pip_packages),
        }
        on_line(f"building kernel image {tag} from {base}")
        _stream_build(
            client, on_line, f"kernel image {tag}", path=context, tag=tag, buildargs=build_args
        )
    on_line(f"built {tag} in {time.monotonic() - started:.0f} s")
    return tag


def ensure_image(
    client: docker.DockerClient,
    options: BuildOptions,
    *,
    build_if_missing: bool = True,
    on_line: LineSink = print,
) -> str:
    """Return the tag of the kernel image, building it first if it is missing."""
    tag = options.resolved_tag()
    if image_exists(client, tag):
        return tag
    if tag == LANGUAGES_IMAGE and not options.languages:
        raise ImageError(
            f"Docker image {tag} (the kernels of R, Bash, JavaScript and TypeScript) does not "
            "exist. Build it with `jupyter-exec image build --languages "
            f"{','.join(IMAGE_LANGUAGES)}`."
        )
    if not build_if_missing:
        raise ImageError(
            f"Docker image {tag} does not exist. Build it with `jupyter-exec image build"
            f"{'' if tag == DEFAULT_IMAGE else ' --tag ' + tag}`, or allow building on first use."
        )
    on_line(
        f"Docker image {tag} is missing: building it now (first use only; this takes a minute "
        "or two). Build it ahead of time with `jupyter-exec image build`."
    )
    return build_image(client, options, on_line)
