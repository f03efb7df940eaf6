"""The Celery app of a worker that runs the `echo` kind: import its parts, then the product's app (whose
start-up check, `workers.kinds.require_all`, now requires the echo parts too). Test harness, not the kind."""

from __future__ import annotations

import tests.kinds.echo_checks
import tests.kinds.echo_jobs
import tests.kinds.echo_workers  # noqa: F401 - registering is the point
from workers.app import app, celery_app

__all__ = ["app", "celery_app"]
