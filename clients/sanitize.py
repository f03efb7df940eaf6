"""The one boundary that makes upstream text storable.

Why it exists: Postgres refuses a NUL in `text` and in JSONB (which also refuses the `\\u0000`
escape), cannot store a lone surrogate (not UTF-8), and refuses a value longer than its column.
A refused write leaves the item `running` until its lease expires, and then it is re-run and
billed again. Scraped pages carry NULs often, and JSON may carry `"\\ud800"`, which Python decodes
happily. So every string the three APIs send passes `clean` in `clients/` before anything else
sees it: the value a result holds is the value stored and the value the next request sends.

What `clean` does, in this order:

1. Lone surrogates become U+FFFD, as WebIDL's USVString conversion does; a surrogate pair that
   arrived as two code points is joined. Python's UTF-16 codec does both (`surrogatepass` out,
   `replace` in), so there is no hand-written pairing logic. Invalid UTF-8 in a 200 body reaches
   this step as lone surrogates (`clients.perplexity` decodes it with `surrogateescape`), so each
   bad byte becomes U+FFFD and the field is named; httpx already replaces them in error bodies.
2. Control characters (Unicode General_Category Cc: U+0000–U+001F, U+007F–U+009F; the set is
   fixed by Unicode's stability policy) are removed. Long text (`multiline`) keeps `\\n` and `\\t`,
   turns CRLF and the other line-breaking controls (CR, VT, FF, U+001C–U+001F, NEL) into `\\n`.
   One-line fields turn every whitespace control, and U+2028/U+2029, into a space so words stay
   apart ("Breaking\\nNews" → "Breaking News"); the rest are dropped.
3. The value is cut to its field's cap. A Python `str` is indexed by code point and step 1 left no
   surrogate halves, so a cut never splits a character's encoding. No ellipsis is added: a cut
   request id or URL stays an exact prefix, which is what a log search or support ticket needs.

Caps, in characters (Postgres `varchar(n)` counts characters, not bytes):

| field | cap | why |
|---|---|---|
| model | 64 | `api_calls.model` is String(64); our longest name, simulated, is 35 characters |
| request id (`x-request-id`) | 128 | `api_calls.request_id` is String(128); a UUID is 36 characters |
| Search response `id` | 128 | the same kind of id (a UUID), kept to the request-id column's size |
| result URL | 2,048 | the de-facto URL limit (sitemaps protocol, search engines, CDNs) |
| result title | 1,000 | page titles are shown at ~60 characters; 1,000 keeps any real one whole |
| result date, last_updated | 64 | ISO 8601 or HTTP dates are 10–30 characters |
| result snippet | 16,000 | 2× the ~8,000 characters of the 2,048 tokens a page we request |
| Agent answer text | 100,000 | ~25,000 tokens, above any answer length we request |
| score legend text | 2,000 | an echo of the criteria levels we sent, which are short |
| error message | 2,000 | a backstop: `_surface` already shortens messages to one 300-character line |
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TextField:
    """How one kind of upstream string is made storable: its cap and whether it may span lines."""

    cap: int
    multiline: bool = False


MODEL = TextField(64)
REQUEST_ID = TextField(128)
SEARCH_ID = TextField(128)
URL = TextField(2_048)
TITLE = TextField(1_000)
DATE = TextField(64)
SNIPPET = TextField(16_000, multiline=True)
ANSWER_TEXT = TextField(100_000, multiline=True)
LEGEND = TextField(2_000, multiline=True)
ERROR = TextField(2_000)

# General_Category Cc. Unicode's stability policy fixes this set, so it is spelled out, not looked up.
CONTROLS = "".join(chr(c) for c in (*range(0x00, 0x20), *range(0x7F, 0xA0)))
LINE_SEPARATORS = "\u2028\u2029"
KEPT_IN_LONG_TEXT = "\t\n"

_ONE_LINE = str.maketrans(
    {c: (" " if c.isspace() else None) for c in CONTROLS} | dict.fromkeys(LINE_SEPARATORS, " ")
)
_MULTILINE = str.maketrans(
    {c: ("\n" if c.isspace() else None) for c in CONTROLS if c not in KEPT_IN_LONG_TEXT}
)
_SURROGATE = re.compile("[\ud800-\udfff]")
# Anything step 1 or 2 would change; most text has none, so most calls return at this check.
_UNSTORABLE_ONE_LINE = re.compile(f"[{re.escape(CONTROLS + LINE_SEPARATORS)}\ud800-\udfff]")
_UNSTORABLE_MULTILINE = re.compile(
    f"[{re.escape(''.join(c for c in CONTROLS if c not in KEPT_IN_LONG_TEXT))}\ud800-\udfff]"
)


def storable_chars(text: str, *, multiline: bool) -> str:
    """Steps 1 and 2 of `clean`: surrogates replaced, control characters removed; no cap."""
    pattern = _UNSTORABLE_MULTILINE if multiline else _UNSTORABLE_ONE_LINE
    if not pattern.search(text):
        return text
    if _SURROGATE.search(text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if multiline:
        return text.replace("\r\n", "\n").translate(_MULTILINE)
    return text.translate(_ONE_LINE)


def clean(text: str, field: TextField) -> str:
    """The storable form of `text` for `field`: valid UTF-8, no control characters, within the cap."""
    return storable_chars(text, multiline=field.multiline)[: field.cap]


def is_storable(text: str, field: TextField) -> bool:
    """True when `clean` would return `text` unchanged (what the tests assert of every output)."""
    return clean(text, field) == text


class Sanitizer:
    """Cleans the strings of one upstream answer and remembers which fields it changed.

    `changed` lists each changed field by its path in the returned object, in reading order, e.g.
    `["model", "search_results[2].snippet"]`: the fact is recorded, never silently absorbed.
    """

    def __init__(self) -> None:
        self.changed: list[str] = []

    def text(self, value: str, field: TextField, path: str) -> str:
        cleaned = clean(value, field)
        if cleaned != value:
            self.changed.append(path)
        return cleaned

    def optional(self, value: str | None, field: TextField, path: str) -> str | None:
        return None if value is None else self.text(value, field, path)

    def json(self, value: Any, field: TextField, path: str) -> Any:
        """A JSON value whose every string (object keys included) is cleaned with `field`."""
        if isinstance(value, str):
            return self.text(value, field, path)
        if isinstance(value, Mapping):
            out: dict[str, object] = {}
            for raw_key, item in value.items():  # JSON object keys are strings
                key = clean(str(raw_key), field)
                if key != raw_key:
                    self.changed.append(_member(path, key))
                out[key] = self.json(item, field, _member(path, key))
            return out
        if isinstance(value, list):
            return [self.json(item, field, f"{path}[{i}]") for i, item in enumerate(value)]
        return value


def _member(path: str, name: str) -> str:
    """`path.name`, or `path['name']` when the name is not an identifier (repr escapes oddities)."""
    return f"{path}.{name}" if name.isidentifier() else f"{path}[{name!r}]"
