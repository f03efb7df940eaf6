"""gunicorn's access log without query strings (`AccessLogger`, set in web/gunicorn_conf.py).

Query strings carry what does not belong in a log: a webhook URL with its token, a search term, a page's
filter. gunicorn's default access line holds the raw request URI and the Referer, both with their queries,
so every format atom that can hold one is rewritten without it: the request line (`%(r)s`), the query
(`%(q)s`, empty), the Referer (`%(f)s`) and the environ atoms `{raw_uri}e`, `{request_uri}e`,
`{query_string}e`. The path stays, so a line still says what was asked for. FACTGATE_ACCESS_LOG_QUERY=true
keeps them (debugging on a trusted host).
"""

from __future__ import annotations

import os
from typing import Any

from gunicorn.glogging import Logger

STRIPPED = "?[query]"  # marks that a query was there without saying what it was


def keeps_queries(env: dict[str, str] | None = None) -> bool:
    """FACTGATE_ACCESS_LOG_QUERY: keep query strings in the access log (off unless set to a true value)."""
    e = os.environ if env is None else env
    return (e.get("FACTGATE_ACCESS_LOG_QUERY") or "").strip().lower() in ("1", "true", "yes", "on")


def without_query(uri: str) -> str:
    """`uri` up to its query (a fragment goes too), with a mark where the query was."""
    cut = min((i for i in (uri.find("?"), uri.find("#")) if i >= 0), default=-1)
    return uri if cut < 0 else uri[:cut] + STRIPPED


class AccessLogger(Logger):  # type: ignore[misc]  # gunicorn ships no type hints
    """gunicorn's Logger whose access-log atoms hold no query string (see the module docstring)."""

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> dict[str, Any]:
        atoms: dict[str, Any] = super().atoms(resp, req, environ, request_time)
        if keeps_queries():
            return atoms
        raw_uri = str(environ.get("RAW_URI") or environ.get("PATH_INFO") or "")
        method, protocol = environ.get("REQUEST_METHOD"), environ.get("SERVER_PROTOCOL")
        atoms["r"] = f"{method} {without_query(raw_uri)} {protocol}"
        atoms["q"] = ""
        if atoms.get("f") not in (None, "-"):
            atoms["f"] = without_query(str(atoms["f"]))
        for key in ("{referer}i", "{raw_uri}e", "{request_uri}e"):
            if atoms.get(key):
                atoms[key] = without_query(str(atoms[key]))
        if "{query_string}e" in atoms:
            atoms["{query_string}e"] = ""
        return atoms
