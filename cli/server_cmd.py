"""`factgate serve`, `factgate worker`, `factgate beat`: the long-running processes.

Server mode (REDIS_URL set): `serve` execs gunicorn, `worker` and `beat` run Celery's, as the Procfile
does. Embedded mode (no REDIS_URL): the broker lives in memory, so `serve` runs the web app (waitress)
and the worker and sweeper in one process, and a separate `worker` or `beat` would have nothing to
talk to — they say so instead of starting.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

import click

from cli.errors import InputError
from config import Settings

EMBEDDED_HINT = (
    "{name} needs REDIS_URL (server mode); without it the broker lives inside `factgate serve` "
    "or `factgate check`, which run their own worker"
)


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ValueError as exc:
        raise InputError(f"bad setting: {exc}") from None


def _require_redis(name: str) -> None:
    if _settings().redis_url is None:
        raise InputError(EMBEDDED_HINT.format(name=f"factgate {name}"))


@click.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--concurrency",
    "-c",
    type=int,
    default=None,
    help="Worker threads (default FACTGATE_WORKER_CONCURRENCY).",
)
@click.option("--loglevel", "-l", default="info", show_default=True)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def worker(concurrency: int | None, loglevel: str, celery_args: tuple[str, ...]) -> None:
    """Run a Celery worker (threads pool, prefetch 1) and its dispatcher loop (one worker leads)."""
    _require_redis("worker")
    from workers.app import celery_app

    conc = concurrency or celery_app.conf.worker_concurrency
    argv = ["worker", "--pool", "threads", "--concurrency", str(conc), "--loglevel", loglevel, *celery_args]
    celery_app.worker_main(argv)


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--loglevel", "-l", default="info", show_default=True)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def beat(loglevel: str, celery_args: tuple[str, ...]) -> None:
    """Run Celery beat (schedules the sweeper). Run exactly one per deployment."""
    _require_redis("beat")
    from workers.api import beat_schedule_path
    from workers.app import celery_app

    # The schedule file lives in the instance folder, which may not exist yet on a fresh deploy.
    beat_schedule_path(_settings()).parent.mkdir(parents=True, exist_ok=True)
    celery_app.start(["beat", "--loglevel", loglevel, *celery_args])


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=None, type=int, help="Port (default: $PORT, else 8000).", show_default=False)
@click.option("--workers", "web_workers", default=2, show_default=True, type=int, help="gunicorn processes.")
@click.option("--threads", default=8, show_default=True, type=int, help="Threads per web process.")
def serve(host: str, port: int | None, web_workers: int, threads: int) -> None:
    """Serve the web pages and the API.

    With REDIS_URL: gunicorn (run workers and beat separately). Without: one process with the web app,
    a worker and the sweeper (embedded mode).
    """
    chosen_port = port if port is not None else int(os.environ.get("PORT") or 8000)
    settings = _settings()
    if settings.redis_url is None:
        _serve_embedded(settings, host, chosen_port, threads)
        return
    # This interpreter's gunicorn: the virtual environment need not be on PATH.
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "--config",
        "python:web.gunicorn_conf",
        "--bind",
        f"{host}:{chosen_port}",
        "--workers",
        str(web_workers),
        "--worker-class",
        "gthread",
        "--threads",
        str(threads),
        "web.app:create_app()",
    ]
    os.execv(argv[0], argv)  # noqa: S606 - replaces this process, fixed argv


def _serve_embedded(settings: Settings, host: str, port: int, threads: int) -> None:
    from waitress.server import create_server

    from config.logging import configure_logging
    from web.app import create_app
    from workers.embedded import EmbeddedWorker

    configure_logging()
    embedded = EmbeddedWorker(settings)
    app = create_app(celery=embedded.app)
    server = create_server(app, host=host, port=port, threads=threads, ident="factgate")

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # SIGTERM (honcho, docker) stops like Ctrl-C: warm worker shutdown

    signal.signal(signal.SIGTERM, stop)
    embedded.start()
    where = f"http://{host}:{server.effective_port}"
    notes = [f"database {settings.effective_database_url().split('///', 1)[-1]}", "worker in this process"]
    if settings.uses_simulator:
        notes.append("no PERPLEXITY_API_KEY: results come from the bundled simulator, not Perplexity")
    click.echo(f"factgate (embedded: {'; '.join(notes)}) serving {where}", err=True)
    click.echo("sign in with a token from `factgate tokens create NAME`", err=True)
    try:
        server.run()
    except KeyboardInterrupt:
        click.echo("stopping: finishing the requests in flight", err=True)
    finally:
        server.close()
        embedded.stop()
