"""Typed contracts for the JSON that crosses layers: result lines, job summaries, question reports.

pydantic v2 rather than msgspec, for three reasons: validation errors carry the field path (`results.
grounded.p`), which is what a test or a log needs to find a drifted field; `model_json_schema` generates the
OpenAPI component schemas (web/openapi.py), so the served document is the code's own shape rather than a
hand-kept copy; and it is already the ecosystem's default (and in our dependency tree). msgspec is faster
at (de)serialising, which matters nowhere here: lines are built one at a time from database rows.

`jobs/` builds these models, the web layer serialises them (`dump`), and pages, CSV and the CLI read their
attributes. Stored JSON (`jobs.summary`, a question's `output.report`) is read back with `model_validate`;
fields added later get defaults, so older rows still load.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Self, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    JsonValue,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

ItemStatusName = Literal["pending", "running", "done", "failed", "skipped"]
SCHEMA_REF = "#/components/schemas/{model}"


# Validation context of `Contract.read`: unknown fields are dropped instead of refused.
_TOLERANT = "tolerant_reader"


@functools.cache
def _known_names(model: type[BaseModel]) -> frozenset[str]:
    """A contract's field names and aliases (asked for every record `read` validates)."""
    return frozenset(
        name for field, spec in model.model_fields.items() for name in (field, spec.alias) if name is not None
    )


class Contract(BaseModel):
    """Frozen, and strict about unknown fields where it is *written*: a contract that grows must say so here
    first, and the server validates every line it builds. A *reader* of another version's lines (the CLI
    talking to a newer server) uses `read`, which ignores fields it does not know, at every depth."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_unknown(cls, data: Any, info: ValidationInfo) -> Any:
        if not (info.context and info.context.get(_TOLERANT)) or not isinstance(data, dict):
            return data
        if cls.model_config.get("extra") != "forbid":
            return data  # a StoredContract keeps what it does not know
        known = _known_names(cls)
        if known.issuperset(data):
            return data
        return {k: v for k, v in data.items() if k in known}

    @classmethod
    def read(cls, data: Any) -> Self:
        """Validate what another process wrote (an API response): the known fields as strictly as ever, the
        unknown ones — added by a newer version — ignored (the context reaches nested contracts too)."""
        return cls.model_validate(data, context={_TOLERANT: True})

    def dump(self) -> dict[str, Any]:
        """JSON-safe dict in declaration order (what the API and the database get)."""
        return self.model_dump(mode="json")


class StoredContract(Contract):
    """Read back from the database: fields other versions wrote are kept, not refused."""

    model_config = ConfigDict(extra="allow", frozen=True)


class StageRecord(Contract):
    """What a stage stores in an item's input or output, and the parts of a report built from them.

    It dumps the fields it was given and no others, in the order they were given, at every depth: a stage
    writes some fields only in some outcomes (an `error` only when it failed), JSON kept as text (SQLite)
    shows its key order, and a row read back and written again must stay the row it was. Fields given
    later with `model_copy(update=...)` follow, in that order. Unknown fields are refused where a record is
    written (a renamed key fails there, and under mypy); `read` ignores the fields a newer version added."""

    _given_order: tuple[str, ...] = PrivateAttr(default=())

    # These hooks run for every record of every stage and report: they read `__pydantic_private__` and
    # `__pydantic_fields_set__` directly rather than through pydantic's attribute lookup.
    @model_validator(mode="wrap")
    @classmethod
    def _remember_order(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        record = handler(data)
        if type(data) is dict:
            record.__pydantic_private__["_given_order"] = tuple(data)
        return record

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copy = super().model_copy(update=update, deep=deep)
        if update:
            # A record made with `model_construct` has no order of its own: its fields' is used.
            fields = type(self).model_fields
            given = self._given_order or tuple(k for k in fields if k in self.model_fields_set)
            copy._given_order = (*given, *(k for k in update if k not in given))
        return copy

    @model_serializer(mode="wrap")
    def _given_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        given = self.__pydantic_fields_set__
        order: tuple[str, ...] = cast("dict[str, Any]", self.__pydantic_private__)["_given_order"]
        if not order:
            return {k: v for k, v in data.items() if k in given}
        out = {k: data[k] for k in order if k in data}  # a key given is a field set (unknown ones dropped)
        if len(out) < len(given):
            out.update((k, v) for k, v in data.items() if k in given and k not in out)
        return out

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # The published schema is the fields' own (the serializer above only leaves out those not given).
        fields_only = cast("CoreSchema", {k: v for k, v in core_schema.items() if k != "serialization"})
        return handler(fields_only)


class QuestionInput(StageRecord):
    """The input of a question kind's entry item (`answer`, `quote`): the kind and the question."""

    kind: str
    question: str


class CallFacts(StageRecord):
    """What a stage stores first of each upstream call it made: its request ids, how many POSTs it took,
    the upstream's time, and which fields had to be cleaned to be storable (workers/steps.py:call_facts)."""

    request_id: str | None = None
    request_ids: list[str] = Field(default_factory=list)
    attempts: int = 0
    latency_s: float = 0.0
    sanitized: list[str] = Field(default_factory=list)


class IncompleteStep(StageRecord):
    """One entry of a report's `incomplete_steps` (docs/spec.md §6.3): which step, where (a sentence, the
    flagged sentences, a result), what became of it, and a sentence for people (pages, CSV and the CLI show
    `message` as it is). The answer and quote kinds also say the error and the request ids; citations
    does not, so each kind's entries keep the fields it gives (`checks.stage_steps.incomplete_step`)."""

    step: str
    sentence: int | None = None
    sentences: list[int] | None = None
    result: int | None = None
    status: str
    error: str | None = None
    request_ids: list[str] = Field(default_factory=list)
    message: str = ""


class ReusedFrom(Contract):
    """Which earlier request answered a reused one (docs/spec.md §10): the original `x-request-id` and when it
    was answered (ISO 8601, as the worker wrote it: kept as text so the stored JSON reads back unchanged)."""

    request_id: str | None = None
    answered_at: str | None = None


def reused_in(rows: Iterable[object]) -> list[ReusedFrom]:
    """Every distinct `reused_from` of a stored report's rows (JSON objects), in order, each original
    request once: a packed request answered several rows."""
    found: dict[str | None, ReusedFrom] = {}
    for row in rows:
        origin = row.get("reused_from") if isinstance(row, Mapping) else None
        if isinstance(origin, Mapping):
            entry = ReusedFrom.read(origin)
            found.setdefault(entry.request_id, entry)
    return list(found.values())


def given_reused_from(origin: ReusedFrom | None) -> dict[str, ReusedFrom]:
    """A stage record's `reused_from` as a field to give: only when its request was answered from the store,
    so the records of requests sent are stored as they always were (`StageRecord` dumps the fields given)."""
    return {"reused_from": origin} if origin is not None else {}


class Cutoffs(Contract):
    supported_min: float
    contradicted_max: float


# Every upstream request id of a report: a list (quote, citations) or lists by endpoint (answer: agent,
# decisions); null in reports stored before they were kept.
RequestIds = list[str] | dict[str, list[str]] | None
# An item's or a question's summed usage (jobs/usage.py): counts and seconds and dollars.
Usage = dict[str, int | float]


class ReportHead(StoredContract):
    """The fields of a question's report that every staged kind writes and every reader relies on; the rest
    (scored sentences, passages, ranks, the run record) is the kind's own and kept as stored.

    Lenient on purpose: reports stored by older versions may lack a field or hold null where a list or an
    object is expected, and an export must never stop half-way over one of them."""

    kind: str = ""
    question: str | None = None
    status: str | None = Field(
        default=None,
        description="The report's outcome (answer: done, failed, skipped, incomplete; quote: "
        "quoted, no_answer, failed, skipped, incomplete).",
    )
    error: str | None = None
    incomplete_steps: list[IncompleteStep] = Field(default_factory=list)
    model_note: str | None = None
    request_ids: RequestIds = None
    usage: Usage | None = None
    summary: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("incomplete_steps", "summary", mode="before")
    @classmethod
    def _null_is_empty(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            return [] if info.field_name == "incomplete_steps" else {}
        return value


class ExportEndFigures(Contract):
    count: int = Field(ge=0, description="The lines above the trailer in this response.")
    after: str | None = Field(description="The `?after=` custom_id this response resumed after, or null.")
    last_id: str | None = Field(description="The custom_id of the last line above, or null.")


class ExportEnd(Contract):
    """The last line of every NDJSON export: without it a download is incomplete (a client that lost the
    connection resumes with `?after=<last_id>`). Its own schema, not a result line's."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    end: ExportEndFigures = Field(alias="_end")


def schema_of(model: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(schema, definitions) for the OpenAPI components: references point at `#/components/schemas/`."""
    schema = model.model_json_schema(ref_template=SCHEMA_REF, mode="serialization")
    defs = schema.pop("$defs", {})
    return schema, defs
