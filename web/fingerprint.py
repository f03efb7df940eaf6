"""The fingerprint of a job submission: what an `Idempotency-Key` stands for.

A key names one submission. Sent again with the same submission it returns the job it created; sent with
anything else it is a conflict (409), because answering with a job built from other claims would be
wrong without saying so. The fingerprint is the sha256 of the body format (JSON or NDJSON), every query
parameter (an NDJSON submission's kind, options and metadata; sorted, so their order does not matter) and
the exact body bytes. The body is hashed as it is read, through `HashingReader`, so a large NDJSON
upload is never held whole just to be hashed, and no second pass over it is needed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable

from web.body import Readable

VERSION = b"factgate-submission-1\n"


class HashingReader:
    """A body stream that feeds every byte read through it to `update` (a hash's)."""

    def __init__(self, stream: Readable, update: Callable[[bytes], None]) -> None:
        self._stream = stream
        self._update = update
        self.bytes_read = 0

    def read(self, size: int = -1, /) -> bytes:
        data = self._stream.read(size)
        self._update(data)
        self.bytes_read += len(data)
        return data


class SubmissionFingerprint:
    """Start with the format and query parameters, read the body through `reader`, then `hexdigest`."""

    def __init__(self, body_format: str, params: Iterable[tuple[str, str]]) -> None:
        self._digest = hashlib.sha256(VERSION)
        head = json.dumps([body_format, sorted(params)], ensure_ascii=False, separators=(",", ":"))
        self._digest.update(head.encode("utf-8", "surrogatepass"))
        self._digest.update(b"\n")
        self._reader: HashingReader | None = None

    def reader(self, stream: Readable) -> HashingReader:
        """The body stream to read the submission from (once)."""
        if self._reader is not None:
            raise RuntimeError("the body is read once")
        self._reader = HashingReader(stream, self._digest.update)
        return self._reader

    def hexdigest(self) -> str:
        """The fingerprint of everything read so far: call it when the body has been read to its end."""
        return self._digest.hexdigest()
