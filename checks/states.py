"""The states a job and an item move through, and the stages built-in kinds create, as StrEnums.

Each enum member *is* its string (`JobStatus.QUEUED == "queued"`), so the columns stay plain strings (no
database enum: a new kind's stage needs no migration) while code names states instead of spelling them.
The sets that several layers used to copy by hand (which statuses are ended, live, cancellable; which item
statuses are terminal) live on the enums, so they cannot drift apart.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """A job's state (docs/architecture.md, "Life of a job")."""

    VALIDATING = "validating"
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @classmethod
    def ended(cls) -> frozenset[JobStatus]:
        """Final: nothing about the job changes any more (its webhook has been written)."""
        return frozenset({cls.COMPLETED, cls.CANCELLED, cls.FAILED})

    @classmethod
    def live(cls) -> frozenset[JobStatus]:
        """Stored and not ended: the sweeper looks after these, they count against a tenant's quota and the
        pages poll them. `validating` is one: a large streamed job answered 202 whose items are being built
        from its staged rows (jobs/bulk_load.py)."""
        return frozenset({cls.VALIDATING, cls.QUEUED, cls.IN_PROGRESS, cls.FINALIZING, cls.CANCELLING})

    @classmethod
    def running(cls) -> frozenset[JobStatus]:
        """Work is being sent: the scheduler shows a share and an ETA, and new stage children may be made."""
        return frozenset({cls.QUEUED, cls.IN_PROGRESS})

    @classmethod
    def cancellable(cls) -> frozenset[JobStatus]:
        """A cancel moves these to `cancelling`; later states are already on their way to an end."""
        return frozenset({cls.VALIDATING, cls.QUEUED, cls.IN_PROGRESS})

    @property
    def is_ended(self) -> bool:
        return self in JobStatus.ended()


class ItemStatus(StrEnum):
    """An item's state: `pending` → `running` → one of the terminal three."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"

    @classmethod
    def terminal(cls) -> frozenset[ItemStatus]:
        """Settled: the item will not run again unless a retry puts it back to pending."""
        return frozenset({cls.DONE, cls.FAILED, cls.SKIPPED})

    @classmethod
    def open(cls) -> frozenset[ItemStatus]:
        """Still to settle: the job cannot finalize while any item is in one of these."""
        return frozenset({cls.PENDING, cls.RUNNING})


class Stage(StrEnum):
    """The stages of the built-in kinds (`items.stage`). A new kind may add its own stage names (the column
    is a plain string); its recipe lists them (checks/recipes.py)."""

    CLAIM = "claim"
    QUESTION = "question"
    SENTENCE = "sentence"
    INVESTIGATION = "investigation"
    RESULT = "result"
    COMPARE = "compare"
