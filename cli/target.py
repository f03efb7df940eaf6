"""Where a CLI command sends its requests: a remote server, or factgate running inside this process.

Remote (`--server URL` or FACTGATE_URL): an `ApiClient` over HTTP with `--token`/FACTGATE_TOKEN.

Local (no server given): the Flask app is built in this process from the environment and the same
`ApiClient` talks to it through `httpx.WSGITransport`, so the exact API validation and intake run.
With no REDIS_URL the broker is in memory and nothing else can run the job, so commands that wait
for a job start an `EmbeddedWorker` here (the same tasks, chords and sweeper as a server worker).
The local token lives in `<instance>/cli-token` (mode 0600), created on first use for the tenant
`local`; it is a bearer token like any other and can be revoked with `factgate tokens revoke`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from cli.client import ApiClient
from cli.errors import CliError, InputError
from config import Settings

if TYPE_CHECKING:
    from flask import Flask

    from workers.embedded import EmbeddedWorker

LOCAL_BASE_URL = "http://factgate.local"
LOCAL_TENANT = "local"
TOKEN_FILE = "cli-token"  # noqa: S105 - a file name, not a secret


@dataclass
class Target:
    """An API client plus what a command needs to say where things are."""

    client: ApiClient
    server_url: str | None = None  # remote only
    settings: Settings | None = None  # local only
    app: Flask | None = None  # local only
    tenant_id: uuid.UUID | None = None  # local only
    token: str | None = field(default=None, repr=False)  # local only: the CLI's own token
    worker: EmbeddedWorker | None = None  # local, in-memory broker only

    @property
    def local(self) -> bool:
        return self.server_url is None

    def job_page(self, job_id: str) -> str | None:
        """The job's page (live progress and report) on a remote server."""
        return None if self.server_url is None else f"{self.server_url}/jobs/{job_id}"

    def describe(self) -> str:
        if self.server_url is not None:
            return f"factgate at {self.server_url}"
        assert self.settings is not None
        if self.settings.embedded:
            return (
                f"embedded factgate (database {self.settings.effective_database_url().split('///', 1)[-1]})"
            )
        return "local factgate on the configured DATABASE_URL/REDIS_URL"


def server_from(option: str | None) -> str | None:
    """`--server` wins over FACTGATE_URL; empty means local."""
    value = option if option is not None else os.environ.get("FACTGATE_URL")
    value = (value or "").strip()
    if not value:
        return None
    if not value.startswith(("http://", "https://")):
        raise InputError(f"--server must be an http:// or https:// URL, got {value!r}")
    return value.rstrip("/")


def token_from(option: str | None) -> str | None:
    value = option if option is not None else os.environ.get("FACTGATE_TOKEN")
    return (value or "").strip() or None


@contextmanager
def open_target(server: str | None, token: str | None, *, run_worker: bool = False) -> Iterator[Target]:
    """A target for one command; `run_worker` starts an embedded worker when the broker is in memory."""
    if server is not None:
        if token is None:
            raise InputError(
                f"talking to {server} needs a token: pass --token or set FACTGATE_TOKEN "
                "(an admin creates one with `factgate tokens create TENANT`)"
            )
        client = ApiClient(server, token)
        try:
            yield Target(client=client, server_url=server)
        finally:
            client.close()
        return
    with _local_target(run_worker) as target:
        yield target


@contextmanager
def _local_target(run_worker: bool) -> Iterator[Target]:
    from web.app import create_app
    from web.session import EXTENSION
    from workers.embedded import EmbeddedWorker

    try:
        settings = Settings.from_env()
    except ValueError as exc:
        raise InputError(f"bad setting: {exc}") from None
    worker = EmbeddedWorker(settings) if run_worker and settings.redis_url is None else None
    try:
        app = create_app(celery=worker.app if worker is not None else None)
    except Exception as exc:
        raise CliError(
            f"cannot open the database {_db_label(settings)}: {type(exc).__name__}: {exc}"
        ) from None
    resources = app.extensions[EXTENSION]
    token, tenant_id = _local_token(app, settings.instance_path)
    client = ApiClient(
        LOCAL_BASE_URL, token, transport=httpx.WSGITransport(app=app), source="the local factgate"
    )
    try:
        if worker is not None:
            worker.start()
        yield Target(
            client=client, settings=settings, app=app, tenant_id=tenant_id, token=token, worker=worker
        )
    finally:
        if worker is not None:
            worker.stop()
        client.close()
        resources.engine.dispose()


def _db_label(settings: Settings) -> str:
    url = settings.effective_database_url()
    if url.startswith("sqlite"):
        return url.split("///", 1)[-1]
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _local_token(app: Flask, instance_path: Path) -> tuple[str, uuid.UUID]:
    """The CLI's own token for this database: read from the instance folder, or created and saved."""
    from jobs.tenancy import authenticate, create_token
    from models import session_scope
    from web.session import EXTENSION

    sessions = app.extensions[EXTENSION].sessions
    path = instance_path / TOKEN_FILE
    saved = None
    with suppress(OSError):
        saved = path.read_text(encoding="utf-8").strip() or None
    with session_scope(sessions) as session:
        if saved is not None:
            tenant = authenticate(session, saved)
            if tenant is not None:
                return saved, tenant.id
        issued = create_token(session, LOCAL_TENANT, "cli")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(issued.token + "\n")
    return issued.token, issued.tenant_id
