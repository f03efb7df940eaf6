"""`factgate worker`, `factgate beat`, `factgate serve`: the server-mode processes."""

from __future__ import annotations

import os

import click


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
    """Run a Celery worker (threads pool, prefetch 1, late acks)."""
    from workers.app import celery_app

    conc = concurrency or celery_app.conf.worker_concurrency
    argv = ["worker", "--pool", "threads", "--concurrency", str(conc), "--loglevel", loglevel, *celery_args]
    celery_app.worker_main(argv)


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--loglevel", "-l", default="info", show_default=True)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def beat(loglevel: str, celery_args: tuple[str, ...]) -> None:
    """Run Celery beat (schedules the sweeper)."""
    from workers.app import celery_app

    celery_app.start(["beat", "--loglevel", loglevel, *celery_args])


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--workers", "web_workers", default=2, show_default=True, type=int)
def serve(host: str, port: int, web_workers: int) -> None:
    """Serve the web app and API with gunicorn."""
    argv = [
        "gunicorn",
        "--bind",
        f"{host}:{port}",
        "--workers",
        str(web_workers),
        "--worker-class",
        "gthread",
        "--threads",
        "4",
        "web.app:create_app()",
    ]
    os.execvp(argv[0], argv)  # noqa: S606 - replaces this process, fixed argv
