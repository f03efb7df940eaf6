"""Waiting for a job with a rich progress bar: items done of total, rate, ETA, elapsed.

Progress comes from the job's `request_counts` (GET /v1/jobs/{id}), the same numbers the API and the
job page show. The bar goes to stderr so stdout holds only results; when stderr is not a terminal,
rich draws nothing live and the command stays quiet until the results.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from checks.states import JobStatus
from clients.factgate_http import JobBody

ENDED = tuple(sorted(JobStatus.ended()))


class EtaColumn(ProgressColumn):
    """Time left: the scheduler's ETA (the job's share of the upstream at its rate) when the server has
    one, else rich's estimate from the recent rate."""

    def __init__(self) -> None:
        super().__init__()
        self._fallback = TimeRemainingColumn()

    def render(self, task: Task) -> Text:
        eta = task.fields.get("eta_s")
        if isinstance(eta, int | float) and eta >= 0:
            minutes, seconds = divmod(int(eta + 0.5), 60)
            hours, minutes = divmod(minutes, 60)
            return Text(f"{hours}:{minutes:02d}:{seconds:02d}", style="progress.remaining")
        return self._fallback.render(task)


class RateColumn(ProgressColumn):
    """Items per second over rich's moving window (what the ETA is computed from)."""

    def render(self, task: Task) -> Text:
        speed = task.speed
        if speed is None:
            return Text("-- items/s", style="progress.data.speed")
        return Text(f"{speed:.1f} items/s", style="progress.data.speed")


def finished_count(job: JobBody) -> tuple[int, int]:
    """(items finished, items in total) from a job status object."""
    counts = job.get("request_counts") or {}
    total = int(counts.get("total") or 0)
    done = (
        int(counts.get("completed") or 0) + int(counts.get("failed") or 0) + int(counts.get("skipped") or 0)
    )
    return done, total


def wait_for_job(
    fetch: Callable[[], JobBody],
    *,
    label: str,
    console: Console,
    interval: float = 0.25,
    sleep: Callable[[float], None] = time.sleep,
) -> JobBody:
    """Poll `fetch()` until the job has ended; returns its last status object."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        RateColumn(),
        TextColumn("ETA"),
        EtaColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, speed_estimate_period=10.0) as progress:
        task = progress.add_task(label, total=None)
        while True:
            job = fetch()
            done, total = finished_count(job)
            schedule = job.get("schedule") or {}
            held = " held (budget spent)" if schedule.get("state") == "held" else ""
            progress.update(
                task,
                total=total or None,
                completed=done,
                description=f"{label} {job.get('status', '')}{held}",
                eta_s=schedule.get("eta_s"),
            )
            if job.get("status") in ENDED:
                return job
            sleep(interval)
