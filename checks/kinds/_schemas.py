"""JSON Schemas of the built-in kinds' rows and options, for the OpenAPI document (web/openapi.py).

Pure data beside the recipes that carry them (`Recipe.row_schema`, `Recipe.options_schema`): the parsers in
checks/claims.py, checks/questions.py and checks/options.py are the authority, these describe them. Kept
in one module because the answer and quote recipes share the question schemas and every kind shares the
`webhook_url` option's text.
"""

from __future__ import annotations

from pydantic import JsonValue

from checks.claims import ALLOWED_FIELDS, CONTRADICTED_MAX, MAX_ID_CHARS, SUPPORTED_MIN
from checks.options import CLAIMS_MODES, CUTOFFS_MODEL
from checks.packing import DEFAULT_AUDIT_SHARE, MAX_PACK_SIZE
from checks.pricing import DEFAULT_MODEL, KNOWN_MODELS
from checks.questions import MAX_QUESTION_BYTES, MAX_QUESTION_ID_CHARS
from checks.webhooks import MAX_URL_CHARS as MAX_WEBHOOK_URL_CHARS

# The models a `model` option names, in the order the schemas list them.
MODELS: list[JsonValue] = [*sorted(KNOWN_MODELS)]


def _choice(values: list[JsonValue], default: str, description: str) -> dict[str, JsonValue]:
    """A string option that takes one of `values`."""
    return {"type": "string", "enum": values, "default": default, "description": description}


def _positive_or_null(description: str) -> dict[str, JsonValue]:
    """A number option above 0; null (or left out) means none."""
    return {"type": ["number", "null"], "exclusiveMinimum": 0, "description": description}


# Options every kind takes, one schema each.
PRIORITY_OPTION = _choice(
    ["interactive", "batch"],
    "batch",
    "`interactive` work goes first within the tenant's share of the upstream "
    "(9 of every 10 of its requests while it also has batch work); `factgate check/ask/quote` "
    "submit as interactive.",
)
BUDGET_OPTION = _positive_or_null("Stop sending once this much has been spent; remaining items are skipped.")
PACK_SIZE_DESCRIPTION = (
    "The most items (an answer's sentences, ungrounded claims) one Decisions request may "
    "carry; 1 sends one request each. Packed items stay items of their own (docs/spec.md §9)."
)
PACK_SIZE_OPTION: dict[str, JsonValue] = {
    "type": "integer",
    "minimum": 1,
    "maximum": MAX_PACK_SIZE,
    "description": PACK_SIZE_DESCRIPTION,
}
AUDIT_SHARE_DESCRIPTION = (
    "The share of packed answers (at least one) whose sentences are asked again one per "
    "request, to measure agreement with the packed verdicts (`packing_audit`); 0 turns it off."
)
AUDIT_SHARE_OPTION: dict[str, JsonValue] = {
    "type": "number",
    "minimum": 0,
    "maximum": 1,
    "default": DEFAULT_AUDIT_SHARE,
    "description": AUDIT_SHARE_DESCRIPTION,
}
WEBHOOK_URL_OPTION: dict[str, JsonValue] = {
    "type": ["string", "null"],
    "format": "uri",
    "maxLength": MAX_WEBHOOK_URL_CHARS,
    "description": "An http(s) URL (no user name or password in it) that receives the job object, signed "
    "(Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature`), when the job completes, "
    "fails or is cancelled; retried with backoff for up to 24 hours, with the same `webhook-id`. Without it "
    "the tenant's default URL is used, if it has one. Private, loopback and link-local addresses are "
    "refused when sending. Only present in the stored options when given.",
}
REUSE_OPTION = _choice(
    ["auto", "none"],
    "auto",
    "`auto`: a request identical to one a job of this tenant already sent (same model, "
    "grounding mode and body) is answered from the tenant's verdict store at no cost, without an upstream "
    "call; never for a `…-latest` model, grounded requests only with `reuse_max_age_hours`. `none`: every "
    "request of this job is sent, and none is kept for later jobs. Only present in the stored options when "
    "`none`.",
)
REUSE_MAX_AGE_OPTION = _positive_or_null(
    "Grounded requests may be answered from stored answers at most this many hours old "
    "(the web changes, so without it a grounded request is always sent). Only present when given."
)

CLAIM_ROW: dict[str, JsonValue] = {
    "type": "object",
    "description": "One claim. Unknown fields are rejected (allowed: " + ", ".join(ALLOWED_FIELDS) + ").",
    "required": ["id", "claim"],
    "additionalProperties": False,
    "properties": {
        "id": {
            "type": "string",
            "maxLength": MAX_ID_CHARS,
            "description": "Unique in the batch; comes back as `custom_id`.",
        },
        "claim": {
            "type": "string",
            "minLength": 1,
            "description": "The claim (at most FACTGATE_MAX_CLAIM_BYTES bytes of UTF-8, default 4096).",
        },
        "label": {
            "type": ["boolean", "null"],
            "description": "Known truth; labelled claims are scored in the scorecard.",
        },
        "kind": {"type": ["string", "null"], "description": "Free-form group, e.g. stable/recent."},
        "source": {"type": ["string", "null"], "description": "Where the label was checked."},
    },
}

CLAIMS_OPTIONS: dict[str, JsonValue] = {
    "type": "object",
    "additionalProperties": False,
    "description": "Options of a `claims` job. Unknown options are rejected. Cutoffs are applied by "
    "factgate and never sent to the model.",
    "properties": {
        "model": {"type": "string", "enum": MODELS, "default": DEFAULT_MODEL},
        "mode": {
            "type": "string",
            "enum": list(CLAIMS_MODES),
            "default": "grounded",
            "description": "`both` sends every claim twice and reports verdict flips.",
        },
        "supported_min": {"type": "number", "minimum": 0, "maximum": 1, "default": SUPPORTED_MIN},
        "contradicted_max": {"type": "number", "minimum": 0, "maximum": 1, "default": CONTRADICTED_MAX},
        "pack_size": {
            **PACK_SIZE_OPTION,
            "default": 1,
            "description": PACK_SIZE_DESCRIPTION + " Above 1 only with mode `ungrounded`.",
        },
        "priority": PRIORITY_OPTION,
        "budget_usd": BUDGET_OPTION,
        "webhook_url": WEBHOOK_URL_OPTION,
        "reuse": REUSE_OPTION,
        "reuse_max_age_hours": REUSE_MAX_AGE_OPTION,
    },
}

QUESTION_ROW: dict[str, JsonValue] = {
    "type": "object",
    "description": "One question of an `answer` or `quote` job.",
    "required": ["id", "question"],
    "additionalProperties": False,
    "properties": {
        "id": {
            "type": "string",
            "maxLength": MAX_QUESTION_ID_CHARS,
            "description": "Unique in the batch; comes back as `custom_id`.",
        },
        "question": {
            "type": "string",
            "minLength": 1,
            "description": f"The question (at most {MAX_QUESTION_BYTES} bytes of UTF-8).",
        },
    },
}

QUESTIONS_OPTIONS: dict[str, JsonValue] = {
    "type": "object",
    "additionalProperties": False,
    "description": "Options of an `answer` or `quote` job. The cutoffs of both checks are fixed "
    "(docs/spec.md §3-§4) and are not options.",
    "properties": {
        "model": {
            "type": "string",
            "enum": MODELS,
            "default": CUTOFFS_MODEL,
            "description": "The Decisions model that scores sentences / ranks results. The default is "
            f"the model the fixed cutoffs were measured on ({CUTOFFS_MODEL}); with any other model "
            "every report notes that the cutoffs were not measured on the model the job used.",
        },
        "pack_size": {
            **PACK_SIZE_OPTION,
            "default": 1,
            "description": "The most sentences (answer: an answer's sentences, and a rewrite's) or search "
            "results (quote: one question's rank requests) one Decisions request may carry; 1, the default, "
            "sends one request each, the shape the recorded outcomes were measured with (docs/spec.md §9).",
        },
        "audit_share": {
            **AUDIT_SHARE_OPTION,
            "description": AUDIT_SHARE_DESCRIPTION + " `answer` jobs with pack_size above 1 only; "
            "stored only when given; `quote` jobs do not audit.",
        },
        "priority": PRIORITY_OPTION,
        "budget_usd": BUDGET_OPTION,
        "webhook_url": WEBHOOK_URL_OPTION,
        "reuse": REUSE_OPTION,
        "reuse_max_age_hours": REUSE_MAX_AGE_OPTION,
    },
}
