"""What the servers of a fleet share through the store, made for one server: the scrape targets and experiments,
stack snapshots, named tokens and the audit log (each None without a run store, or for the targets and snapshots,
on a store only one server uses).

Invariant: a part is shared exactly when the store is one a fleet can share (`Backend.shared`: PostgreSQL); the
named tokens and the audit log live in any run store, so every server on it agrees.
"""

from __future__ import annotations

from ..access.audit import KIND as AUDIT_KIND
from ..access.audit import AuditLog
from ..access.tokens import KIND as TOKENS_KIND
from ..access.tokens import REFRESH_S, TokenBook
from ..runstore.backend import Backend
from ..workers.batch_worker import Periodic
from .records import SharedDocument, SharedRecords
from .shared_book import SharedBook


def shared_targets(backend: Backend | None) -> SharedDocument | None:
    """The scrape targets and experiments as one document the fleet edits."""
    if backend is None or not backend.shared:
        return None
    return SharedDocument(SharedRecords(backend, "targets"), "fleet")


def shared_snapshots(backend: Backend | None) -> SharedBook | None:
    """Stack snapshots in the store: every server of the fleet sees them (None: files under data_dir)."""
    if backend is None or not backend.shared:
        return None
    return SharedBook(SharedRecords(backend, "stack"), lambda s: s["id"],
                      lambda s: (s["project"], s["experiment_name"]), ("reports",))


def token_book(backend: Backend | None) -> tuple[TokenBook | None, Periodic | None]:
    """The named tokens and their poll (revocations seen within REFRESH_S)."""
    if backend is None:
        return None, None
    book = TokenBook(SharedRecords(backend, TOKENS_KIND))
    book.refresh()
    return book, Periodic("tokens", REFRESH_S / 2, book.poll)


def audit_log(backend: Backend | None, retention_days: float) -> tuple[AuditLog | None, Periodic | None]:
    """The audit log and its pruning (kept as long as the runs)."""
    if backend is None:
        return None, None
    log_ = AuditLog(SharedRecords(backend, AUDIT_KIND), retention_days)
    return log_, Periodic("audit-prune", 3600.0, log_.prune)


def shared_records(backend: Backend | None, kind: str) -> SharedRecords | None:
    return SharedRecords(backend, kind) if backend is not None and backend.shared else None
