"""Reading back what ``write_deployment`` wrote, the way each gateway reads it.

The gateways render ``kernel-pod.yaml.j2`` inside their own ``launch_kubernetes.py``, which
needs the Kubernetes client and a cluster; these helpers do the rendering part as each one
does it (Enterprise Gateway 3.3: raw ``KERNEL_*`` strings and a ``yaml_safe`` filter;
gateway_provisioners 0.5: every value through ``yaml.safe_load``, no extra filter), then add
the launch environment to the pod's ``env`` as both do, so tests check the pod the API server
would get.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jinja2
import kubernetes_validate
import yaml

from jupyter_exec.cluster.deploy import DeploySettings, write_deployment

KUBERNETES_VERSION = "1.30"
"""The oldest Kubernetes the files are validated against (``endPort`` is GA since 1.25)."""

PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_]+)\}")
"""How both gateways find the placeholders in a kernelspec's argv."""

EG_PLACEHOLDERS = {"kernel_id", "response_address", "public_key", "port_range"}
GP_PLACEHOLDERS = {*EG_PLACEHOLDERS, "transport_encryption"}

SAMPLE_LAUNCH = {
    "KERNEL_ID": "0b5c3b9e-54a4-4d0f-9d0e-7c1a2b3c4d5e",
    "KERNEL_POD_NAME": "alice-0b5c3b9e-54a4-4d0f-9d0e-7c1a2b3c4d5e",
    "KERNEL_NAMESPACE": "jupyter-exec",
    "KERNEL_USERNAME": "alice",
    "KERNEL_SERVICE_ACCOUNT_NAME": "default",
    "KERNEL_LANGUAGE": "python",
    "RESPONSE_ADDRESS": "10.1.2.3:8877",
    "PUBLIC_KEY": "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA",
    "PORT_RANGE": "40000..41000",
}
"""A launch environment as Enterprise Gateway hands it to ``launch_kubernetes.py``."""


def fake_launcher(folder: Path) -> Path:
    """A stand-in for ``cluster/launcher.py`` (the ConfigMap only carries its text)."""
    path = folder / "launcher.py"
    path.write_text("# the jupyter-exec launcher\nprint('launcher')\n")
    return path


def settings(tmp_path: Path, **overrides: Any) -> DeploySettings:
    base: dict[str, Any] = {
        "hosts": ("127.0.0.2", "127.0.0.3"),
        "ssh_port": 2222,
        "ssh_user": "kernels",
        "launcher": fake_launcher(tmp_path),
    }
    return DeploySettings(**{**base, **overrides})


def write_all(tmp_path: Path, **overrides: Any) -> Path:
    out = tmp_path / "out"
    write_deployment(
        ["enterprise-gateway", "kubernetes", "helm"], out, settings(tmp_path, **overrides)
    )
    return out


def _yaml_safe(value: Any) -> str:
    """Enterprise Gateway 3.3's ``yaml_safe`` filter, as its launcher registers it."""
    if isinstance(value, str):
        return str(yaml.dump(value, default_style='"', width=10000).strip())
    if isinstance(value, dict | list):
        return str(yaml.dump(value, default_flow_style=True, width=10000).strip())
    return str(yaml.dump(value, width=10000).replace("\n...", "").strip())


def _environment(folder: Path, *, eg: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=jinja2.select_autoescape(
            disabled_extensions=("j2", "yaml"), default_for_string=True, default=True
        ),
    )
    if eg:
        env.filters["yaml_safe"] = _yaml_safe
    return env


def render_pod(scripts: Path, launch_env: dict[str, str], *, eg: bool) -> list[dict[str, Any]]:
    """Every document the gateway's launcher would send, its env extended as the launcher does."""
    keywords: dict[str, Any] = {}
    for name, value in launch_env.items():
        if name.startswith("KERNEL_"):
            if eg and name not in ("KERNEL_VOLUMES", "KERNEL_VOLUME_MOUNTS"):
                keywords[name.lower()] = value
            else:
                keywords[name.lower()] = yaml.safe_load(value)
    text = _environment(scripts, eg=eg).get_template("/kernel-pod.yaml.j2").render(**keywords)
    documents = [d for d in yaml.safe_load_all(text) if d]
    for document in documents:
        if document.get("kind") == "Pod":
            _extend_env(document, launch_env)
    return documents


def _extend_env(pod: dict[str, Any], launch_env: dict[str, str]) -> None:
    stanza = pod["spec"]["containers"][0].get("env") or []
    seen = []
    for item in stanza:
        if item.get("name") in launch_env:
            item["value"] = launch_env[item["name"]]
            seen.append(item["name"])
    stanza += [{"name": k, "value": v} for k, v in launch_env.items() if k not in seen]
    pod["spec"]["containers"][0]["env"] = stanza


def validate(document: dict[str, Any]) -> None:
    """Kubernetes' own schema, strict: an unknown or misspelt field fails."""
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def substitute(argv: list[str], values: dict[str, str]) -> list[str]:
    """The gateway's substitution: known names replaced, unknown ones left as they are."""
    return [PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group()), a) for a in argv]
