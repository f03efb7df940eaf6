"""The job, item and stage StrEnums, re-exported for the data layer.

They live in `checks/states.py` (pure, importing nothing) so that a process that only needs the names —
the `factgate` command's progress display — does not import SQLAlchemy and every model with them (the
`models` package loads all of its tables on import). `import-linter` allows this one import from
`checks/` (pyproject.toml, the models contract).
"""

from checks.states import ItemStatus, JobStatus, Stage

__all__ = ["ItemStatus", "JobStatus", "Stage"]
