"""factgate: SQLAlchemy models, engine and session factory (the schema changes only via migrations/)."""

from models.base import Base, utcnow
from models.db import (
    autocommit_scope,
    database_unreachable,
    make_engine,
    make_session_factory,
    session_scope,
)
from models.jobs import (
    ITEM_STATUSES,
    ITEM_TERMINAL_STATUSES,
    JOB_LIVE_STATUSES,
    JOB_STATUSES,
    ApiCall,
    Item,
    Job,
    SourceList,
    UsageDay,
    Verdict,
    intake_rows,
)
from models.sessions import SESSION_END_REASONS, WebSession
from models.states import ItemStatus, JobStatus, Stage
from models.tenancy import ApiToken, Tenant
from models.webhooks import DELIVERY_STATUSES, WEBHOOK_EVENTS, WebhookAttempt, WebhookDelivery

__all__ = [
    "DELIVERY_STATUSES",
    "ITEM_STATUSES",
    "ITEM_TERMINAL_STATUSES",
    "JOB_LIVE_STATUSES",
    "JOB_STATUSES",
    "SESSION_END_REASONS",
    "WEBHOOK_EVENTS",
    "ApiCall",
    "ApiToken",
    "Base",
    "Item",
    "ItemStatus",
    "Job",
    "JobStatus",
    "SourceList",
    "Stage",
    "Tenant",
    "UsageDay",
    "Verdict",
    "WebSession",
    "WebhookAttempt",
    "WebhookDelivery",
    "autocommit_scope",
    "database_unreachable",
    "intake_rows",
    "make_engine",
    "make_session_factory",
    "session_scope",
    "utcnow",
]
