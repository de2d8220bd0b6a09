"""The REST reference, generated from ``server_extension/openapi.yaml`` (no network, no JS).

``.. jx-openapi:: ../server_extension/openapi.yaml`` renders, in order: the API's
description, one section per operation (method and path, summary, description, parameters,
request body, responses), then one section per schema with a table of its fields. Schema
references become links between the sections. The YAML is a dependency of the page, so
editing the spec rebuilds it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from jx_reference import GeneratedDirective, underline
from sphinx.application import Sphinx

METHODS = ("get", "post", "put", "patch", "delete")


TABLE_RULE = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def table_cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def md_table_to_rst(rows: list[str]) -> list[str]:
    """A Markdown pipe table (header, rule, rows) as an rst list-table."""
    body = [table_cells(row) for row in rows if not TABLE_RULE.match(row)]
    out = ["", ".. list-table::", "   :header-rows: 1", ""]
    for cells in body:
        out += [f"   * - {cells[0] or ' '}"] + [f"     - {cell or ' '}" for cell in cells[1:]]
    return [*out, ""]


def md_to_rst(text: str) -> list[str]:
    """The Markdown subset OpenAPI descriptions use here (code spans, lists, tables) as rst."""
    text = re.sub(r"(?<!`)`([^`\n]+)`(?!`)", r"``\1``", text.strip())
    text = re.sub(r"\*\*([^*]+)\*\*", r"**\1**", text)
    lines: list[str] = []
    table: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.lstrip().startswith("|"):
            table.append(line)
            continue
        if table:
            lines += md_table_to_rst(table)
            table = []
        lines.append(line)
    out: list[str] = []
    in_list = False
    for line in lines[:-1]:
        is_item = line.startswith("- ")
        continues = in_list and line.startswith("  ")
        starts_or_ends = (is_item and not in_list) or (in_list and not is_item and not continues)
        if starts_or_ends and out and out[-1].strip():  # rst wants blank lines around a list
            out.append("")
        in_list = (is_item or continues) and bool(line.strip())
        out.append(line)
    return out


def schema_label(name: str) -> str:
    return f"rest-schema-{name.lower()}"


def describe_schema(schema: dict[str, Any]) -> str:
    """A one-line rst description of a schema: a link for a ``$ref``, else its type."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f":ref:`{name} <{schema_label(name)}>`"
    if "allOf" in schema:
        return " and ".join(describe_schema(part) for part in schema["allOf"])
    kind = schema.get("type", "object")
    if kind == "array":
        return f"array of {describe_schema(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {describe_schema(schema['additionalProperties'])}"
    extra = []
    if "enum" in schema:
        extra.append("one of " + ", ".join(f"``{v}``" for v in schema["enum"]))
    if "format" in schema:
        extra.append(schema["format"])
    if "pattern" in schema:
        extra.append(f"matching ``{schema['pattern']}``")
    if schema.get("nullable"):
        extra.append("or null")
    if "default" in schema:
        extra.append(f"default ``{schema['default']}``")
    if "minimum" in schema:
        op = ">" if schema.get("exclusiveMinimum") else ">="
        extra.append(f"{op} {schema['minimum']}")
    return f"{kind}" + (f" ({'; '.join(str(e) for e in extra)})" if extra else "")


def one_line(text: str) -> str:
    return " ".join(md_to_rst(text)).strip() if text else ""


class OpenApi(GeneratedDirective):
    required_arguments = 1

    def spec(self) -> dict[str, Any]:
        path = (Path(self.env.app.confdir) / self.arguments[0]).resolve()
        self.env.note_dependency(str(path))
        loaded: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
        return loaded

    def lines(self) -> list[str]:
        spec = self.spec()
        components = spec.get("components", {})
        responses = components.get("responses", {})
        parameters = components.get("parameters", {})
        info = spec.get("info", {})
        out: list[str] = []
        out += [*md_to_rst(info.get("description", "")), ""]
        out += [
            f"OpenAPI {spec.get('openapi', '?')}, API version ``{info.get('version', '?')}``.",
            "",
        ]
        out += underline("Operations", "-")
        for route, item in spec.get("paths", {}).items():
            shared = item.get("parameters", [])
            for method in METHODS:
                if method not in item:
                    continue
                op = item[method]
                op_id = op.get("operationId", f"{method}-{route}")
                out += [f".. _rest-{op_id.lower()}:", ""]
                out += underline(f"{method.upper()} {route}", "^")
                if op.get("summary"):
                    out += [f"**{op['summary'].rstrip('.')}.**", ""]
                if op.get("description"):
                    out += [*md_to_rst(op["description"]), ""]
                fields: list[str] = []
                for param in shared + op.get("parameters", []):
                    if "$ref" in param:
                        param = parameters[param["$ref"].rsplit("/", 1)[-1]]
                    where = param.get("in", "?")
                    fields.append(
                        f":{where} parameter ``{param['name']}``: "
                        f"{describe_schema(param.get('schema', {}))}. "
                        f"{one_line(param.get('description', ''))}"
                    )
                body = op.get("requestBody")
                if body:
                    for mime, content in body.get("content", {}).items():
                        needed = "required" if body.get("required") else "optional"
                        fields.append(
                            f":request body ({needed}): ``{mime}``, "
                            f"{describe_schema(content.get('schema', {}))}"
                        )
                fields.append(":responses:")
                for status, response in op.get("responses", {}).items():
                    if "$ref" in response:
                        response = responses[response["$ref"].rsplit("/", 1)[-1]]
                        what = "an error (see :ref:`rest-errors`)"
                    else:
                        parts = [one_line(response.get("description", "")).rstrip(".")]
                        for mime, content in response.get("content", {}).items():
                            parts.append(
                                f"``{mime}``, {describe_schema(content.get('schema', {}))}"
                            )
                        what = "; ".join(p for p in parts if p)
                    fields.append(f"   * ``{status}``: {what}")
                out += [*fields, ""]
        out += [".. _rest-errors:", ""]
        out += underline("Errors", "-")
        for name, response in responses.items():
            out += [f"**{name}**:", "", *md_to_rst(response.get("description", "")), ""]
        out += underline("Schemas", "-")
        for name, schema in components.get("schemas", {}).items():
            out += [f".. _{schema_label(name)}:", ""]
            out += underline(name, "^")
            if schema.get("description"):
                out += [*md_to_rst(schema["description"]), ""]
            props = schema.get("properties", {})
            if not props:
                out += [describe_schema(schema), ""]
                continue
            if schema.get("additionalProperties") is False:
                out += ["Unknown fields are refused (400).", ""]
            required = set(schema.get("required", []))
            out += [".. list-table::", "   :header-rows: 1", "   :widths: 20 30 50", ""]
            out += ["   * - field", "     - type", "     - meaning"]
            for field, sub in props.items():
                mark = " (required)" if field in required else ""
                out += [
                    f"   * - ``{field}``{mark}",
                    f"     - {describe_schema(sub)}",
                    f"     - {one_line(sub.get('description', '')) or ' '}",
                ]
                for inner, inner_schema in sub.get("properties", {}).items():
                    out += [
                        f"   * - ``{field}.{inner}``",
                        f"     - {describe_schema(inner_schema)}",
                        f"     - {one_line(inner_schema.get('description', '')) or ' '}",
                    ]
            out += [""]
        security = components.get("securitySchemes", {})
        if security:
            out += underline("Authentication", "-")
            for name, scheme in security.items():
                where = f"{scheme.get('in', '')} ``{scheme.get('name', '')}``".strip()
                out += [
                    f"**{name}** ({scheme.get('type', '')}, {where}): "
                    f"{one_line(scheme.get('description', ''))}",
                    "",
                ]
        return out


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("jx-openapi", OpenApi)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
