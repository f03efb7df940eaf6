"""The Flask app factory.

One app holds one Settings, one engine and session factory, and one Celery app that it uses only to
enqueue (`workers.api.enqueue_start`, by task name). Embedded mode (SQLite) migrates its database at
startup because nothing else would; server mode never does — the release step runs migrations once,
not every web process at boot.

Behind a reverse proxy (TLS terminated there), FACTGATE_TRUST_PROXY=N wraps the app in werkzeug's
ProxyFix trusting the last N values of X-Forwarded-For, -Proto, -Host and -Port: the app then sees the
client's address, https and the public host as the proxy received them. Set N to the number of proxies
that append to those headers; with 0 (the default) they are ignored, since any client can send them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from celery import Celery
from flask import Flask
from flask.json.provider import DefaultJSONProvider
from sqlalchemy import Engine
from sqlalchemy.pool import NullPool
from werkzeug.middleware.proxy_fix import ProxyFix

import migrations
from config import Settings
from config.redis_url import redis_client
from models import make_engine, make_session_factory
from web.api import api, meta
from web.body import BodyPace, PacedBodies
from web.errors import register_error_handlers
from web.health import READY_TIMEOUT_S, health
from web.kinds import require_all
from web.metrics import init_app as init_metrics
from web.pages import init_pages
from web.session import EXTENSION, WebResources, close_db_session
from web.template_code import TEMPLATE_CODE
from workers.api import producer_celery

HEALTH_TIMEOUT_S = float(READY_TIMEOUT_S)  # Redis socket timeouts: a readiness ping must not hang


def _probe_engine(url: str, engine: Engine) -> Engine:
    """The engine /readyz uses: a fresh Postgres connection per probe, bounded by READY_TIMEOUT_S for the
    connect (libpq `connect_timeout`) and for the statement; SQLite is a local file, the app's engine."""
    if url.startswith("sqlite"):
        return engine
    timeout_ms = READY_TIMEOUT_S * 1000
    return make_engine(
        url,
        poolclass=NullPool,
        pool_pre_ping=False,
        connect_args={"connect_timeout": READY_TIMEOUT_S, "options": f"-c statement_timeout={timeout_ms}"},
    )


def create_app(overrides: Mapping[str, Any] | None = None, *, celery: Celery | None = None) -> Flask:
    """Build the web app from the environment, with `overrides` (Settings field names) applied."""
    settings = Settings.from_env().with_overrides(overrides)
    require_all()  # every kind has its pages and its state changes, or the app does not start
    url = settings.effective_database_url()
    if url.startswith("sqlite"):
        migrations.ensure_current(url)
    engine = make_engine(url)
    redis = None
    if settings.redis_url:
        # Plain or Sentinel, through the parser every Redis client uses (config/redis_url.py).
        redis = redis_client(
            settings.redis_url, socket_timeout=HEALTH_TIMEOUT_S, connect_timeout=HEALTH_TIMEOUT_S
        )

    app = Flask(__name__)
    # Compiled templates outlive the app: see web/template_code.py.
    app.jinja_options = {**app.jinja_options, "bytecode_cache": TEMPLATE_CODE}
    # Under everything else (ProxyFix included): every request body keeps a pace, every send a timeout.
    app.wsgi_app = PacedBodies(  # type: ignore[method-assign]
        app.wsgi_app, BodyPace(settings.body_grace_s, settings.body_min_bytes_per_s), settings.send_timeout_s
    )
    if settings.trust_proxy:
        hops = settings.trust_proxy
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops, x_port=hops
        )
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    cast(DefaultJSONProvider, app.json).sort_keys = False
    if settings.secret_key:
        app.config["SECRET_KEY"] = settings.secret_key
    app.extensions[EXTENSION] = WebResources(
        settings=settings,
        engine=engine,
        probe_engine=_probe_engine(url, engine),
        sessions=make_session_factory(engine),
        celery=celery if celery is not None else producer_celery(settings),
        redis=redis,
        reading_sessions=None
        if url.startswith("sqlite")
        else make_session_factory(engine.execution_options(isolation_level="AUTOCOMMIT")),
    )
    app.teardown_appcontext(close_db_session)
    register_error_handlers(app)
    app.register_blueprint(api)
    app.register_blueprint(meta)
    app.register_blueprint(health)
    init_pages(app)
    init_metrics(app)
    return app
