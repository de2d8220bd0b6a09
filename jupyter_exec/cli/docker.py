"""The Docker subcommands of ``jupyter-exec``: ``image build`` and ``reap``.

Each is a :class:`~jupyter_exec.cli.commands.Command` (``IMAGE_COMMAND``,
``REAP_COMMAND``) whose ``run`` takes the parsed arguments and returns an exit status; our
errors (Docker not running, a failed build) reach the command line's one error table.
``python -m jupyter_exec.docker`` runs the same parser limited to these three.
"""

from __future__ import annotations

import argparse

from jupyter_exec.cli.commands import Command

__all__ = ["DOCKER_COMMANDS", "IMAGE_COMMAND", "REAP_COMMAND"]

DOCKER_COMMANDS = ("image", "kernels", "reap")

IMAGE_EPILOG = """\
examples:
  jupyter-exec image build
      the default kernel image jupyter-exec/kernel:latest (ipykernel, numpy, pandas, matplotlib)
  jupyter-exec image build --base-image jupyter-exec/base:bookworm
      the same image on top of a local base image (no registry needed)
  jupyter-exec image build --pip scikit-learn seaborn --tag my/kernel:ml
      extra packages, under your own tag; use it with Session(docker={"image": "my/kernel:ml"})
  jupyter-exec image build --requirements requirements.txt
      a requirements file; without --tag the image gets a tag derived from its content
  jupyter-exec image build --dockerfile ./Dockerfile --tag my/kernel:custom
      your Dockerfile is built first and the kernel layer (ipykernel in /opt/kernel) goes on top
  jupyter-exec image build --languages r,bash,javascript,typescript
      the kernel image with R, Bash and Deno (JavaScript, TypeScript) kernels added, tagged
      jupyter-exec/kernel:languages: what Session(language="r", backend="docker") runs
"""

REAP_EPILOG = """\
Kernel containers are labelled io.jupyter-exec.kernel=1 with their owner process. reap removes
the ones whose owner process on this host is gone (and their run dirs), which jupyter-exec also
does on the first kernel start in each process.
examples:
  jupyter-exec reap              remove orphans
  jupyter-exec reap --dry-run    only list them
  jupyter-exec reap --all        also containers kept for inspection (auto_remove=False)
"""


def _image_arguments(parser: argparse.ArgumentParser) -> None:
    """The actions of ``jupyter-exec image``: ``build``."""
    actions = parser.add_subparsers(dest="image_command", metavar="COMMAND")
    actions.required = True
    IMAGE_BUILD_COMMAND.register(actions)


def _build_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``jupyter-exec image build``."""
    from jupyter_exec.docker.image import DEFAULT_BASE_IMAGE

    parser.add_argument(
        "--base-image",
        default=DEFAULT_BASE_IMAGE,
        metavar="IMAGE",
        help="image to build on; needs python3 with venv (default: %(default)s)",
    )
    parser.add_argument(
        "--pip", nargs="+", action="extend", default=[], metavar="PKG", help="extra pip packages"
    )
    parser.add_argument("--requirements", metavar="FILE", help="a pip requirements file to install")
    parser.add_argument("--dockerfile", metavar="FILE", help="your Dockerfile, used as the base")
    parser.add_argument(
        "--no-data-stack",
        action="store_true",
        help="leave out numpy, pandas and matplotlib (a smaller image)",
    )
    parser.add_argument(
        "--tag",
        default="",
        help="image tag (default: jupyter-exec/kernel:latest, or a content-hashed tag when "
        "--pip/--requirements/--dockerfile are given)",
    )
    parser.add_argument(
        "--languages",
        default="",
        metavar="LIST",
        help="comma-separated kernels to add: r, bash, javascript, typescript (default tag "
        "then: jupyter-exec/kernel:languages for all four)",
    )


def _reap_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``jupyter-exec reap``."""
    parser.add_argument(
        "--all", action="store_true", help="also remove containers kept for inspection"
    )
    parser.add_argument(
        "--other-hosts",
        action="store_true",
        help="also remove containers started from other host names (their owners can't be "
        "checked from here)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list, do not remove")


def _image_build(args: argparse.Namespace) -> int:
    from jupyter_exec.docker.engine import connect
    from jupyter_exec.docker.image import BuildOptions, build_image, image_languages

    options = BuildOptions(
        tag=args.tag,
        base_image=args.base_image,
        pip_packages=tuple(args.pip),
        requirements_file=args.requirements or "",
        dockerfile=args.dockerfile or "",
        data_stack=not args.no_data_stack,
        languages=image_languages(args.languages),
    )
    client = connect()
    try:
        tag = build_image(client, options, on_line=lambda line: print(line, flush=True))
    finally:
        client.close()
    print(tag)
    return 0


def _reap(args: argparse.Namespace) -> int:
    from jupyter_exec.docker.engine import connect
    from jupyter_exec.docker.reap import reap

    client = connect()
    try:
        result = reap(
            client, include_kept=args.all, other_hosts=args.other_hosts, dry_run=args.dry_run
        )
    finally:
        client.close()
    verb = "would remove" if args.dry_run else "removed"
    for name in result.removed:
        print(f"{verb} {name}")
    for name in result.kept:
        print(f"kept {name} (kept for inspection; --all removes it)")
    if not result.removed:
        print("no orphaned kernel containers")
    return 0


REAP_COMMAND = Command(
    "reap",
    help="remove kernel containers left behind by dead processes",
    description="Remove kernel containers whose owner process is gone.",
    epilog=REAP_EPILOG,
    arguments=_reap_arguments,
    run=_reap,
)


IMAGE_BUILD_COMMAND = Command(
    "build",
    help="build the kernel image (streams the build log)",
    description="Build the kernel image: ipykernel in a venv at /opt/kernel on BASE_IMAGE.",
    epilog=IMAGE_EPILOG,
    arguments=_build_arguments,
    run=_image_build,
)

IMAGE_COMMAND = Command(
    "image",
    help="build the Docker kernel image",
    description="Manage the Docker kernel image.",
    arguments=_image_arguments,
)
