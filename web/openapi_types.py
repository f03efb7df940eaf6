"""The pieces of the OpenAPI 3.1 document (web/openapi.py) as types: the document, its paths, operations,
parameters, request bodies and responses have fixed fields, so mypy holds the hand-written document to
them; a JSON Schema is open JSON (any keyword of the specification, any nesting), so it is `Schema`.

The functional TypedDict form is used where a field's name is OpenAPI's (`in` is a Python keyword,
`operationId` is camelCase).
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from pydantic import JsonValue

__all__ = [
    "Document",
    "Header",
    "MediaType",
    "Operation",
    "Parameter",
    "PathItem",
    "RequestBody",
    "Response",
    "Schema",
    "object_schema",
]

# A JSON Schema (or a `$ref` to one): open JSON, as the specification allows.
Schema = dict[str, JsonValue]


class MediaType(TypedDict):
    schema: NotRequired[Schema]  # absent: any body of the media type (this document's own)


class Header(TypedDict):
    description: NotRequired[str]
    schema: Schema


class Response(TypedDict):
    description: str
    headers: NotRequired[dict[str, Header]]
    content: NotRequired[dict[str, MediaType]]


class RequestBody(TypedDict):
    required: NotRequired[bool]
    content: dict[str, MediaType]


Parameter = TypedDict(
    "Parameter",
    {
        "name": str,
        "in": str,
        "required": NotRequired[bool],
        "description": NotRequired[str],
        "schema": Schema,
    },
)


class Operation(TypedDict):
    operationId: str
    summary: str
    description: NotRequired[str]
    parameters: NotRequired[list[Parameter]]
    requestBody: NotRequired[RequestBody]
    responses: dict[str, Response]
    security: NotRequired[list[dict[str, list[str]]]]


# An HTTP method (`get`, `post`, `delete`) to its operation.
PathItem = dict[str, Operation]


class Info(TypedDict):
    title: str
    version: str
    description: str


class Components(TypedDict):
    securitySchemes: dict[str, Schema]
    schemas: dict[str, Schema]


class Document(TypedDict):
    openapi: str
    info: Info
    servers: list[dict[str, str]]
    security: list[dict[str, list[str]]]
    components: Components
    paths: dict[str, PathItem]
    webhooks: dict[str, PathItem]


def object_schema(value: JsonValue) -> Schema:
    """A node of a schema that the document writes as an object (a schema's `properties`, a property's
    schema); anything else is a bug in the document, raised here rather than written into it."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON Schema object, found {type(value).__name__}")
    return value
