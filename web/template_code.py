"""Compiled templates kept for the life of the process, shared by every app it builds.

Why: Jinja compiles a template the first time an app's environment loads it (its generated Python, then
`compile()`), about 15 ms for the job page here, and a new app starts with an empty cache. A web worker
builds one app, but the embedded mode, the CLI's local commands and the test suite build one per job,
command or test, and each recompiled every page it showed. Jinja's bytecode cache keys each template by
name and checks the source's checksum, so an edited template is compiled again and nothing stale is served.
"""

from __future__ import annotations

import threading

from jinja2.bccache import Bucket, BytecodeCache


class ProcessTemplateCode(BytecodeCache):
    """Jinja's bytecode cache in this process's memory (a dict of marshalled code, one entry per template)."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def load_bytecode(self, bucket: Bucket) -> None:
        with self._lock:
            code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: Bucket) -> None:
        code = bucket.bytecode_to_string()
        with self._lock:
            self._code[bucket.key] = code

    def clear(self) -> None:
        with self._lock:
            self._code.clear()


TEMPLATE_CODE = ProcessTemplateCode()
