"""The ledger spool: charges that could not reach the database, kept on local disk until they can.

A provider call has been made (and will be billed to the institution) by the time its ledger row
is written. If the database refuses that write (an outage, a failover, a lost commit
acknowledgement), the entry is appended to a spool file and fsync'ed, and replayed when the
database answers again, automatically (`replay_soon`) or with `manage.py replay_ledger_spool`,
each entry through the ledger's door (licensing.ledger.actions.spool_replay).

Files: one `<pid>-<n>.jsonl` per writing process in GATEWAY["LEDGER_SPOOL_DIR"], one JSON entry
per line. Writers and the replayer lock a file with flock; the replayer claims a file by renaming
it, and a writer that finds its path renamed under it opens a new file, so no entry is written
into a file that is being replayed. Replay is idempotent: the ledger's request id is unique and the
store inserts `ON CONFLICT (request_id) DO NOTHING`, charging only the rows it inserted, so an
entry whose first write did commit (only its acknowledgement was lost) is skipped.

Nothing is called that cannot be recorded: once a ledger write has failed (the database is down)
and until one succeeds again, `spool_refuses()` tells the pipeline, before the provider call,
that the spool could not take the row either (it does not open for append, or its disk is
nearly full), and the request gets the spec's 503 instead. While the database is up that check
is one global read.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import orjson
from django.conf import settings
from django.db import InterfaceError, OperationalError

from core import crashpoints, metrics
from core.db import run_db

from .budget import BudgetConfig, BudgetState, WalletKey
from .record import LedgerEntry

logger = logging.getLogger("gateway.ledger")

# Writes one replayed entry unless its request id is in the ledger already; True when written.
Record = Callable[..., bool]

# Errors that mean "the database is not there right now": stop replaying and try again later.
UNAVAILABLE = (OperationalError, InterfaceError)
REJECTED = "rejected.jsonl"
PROBE = ".writable"  # the writability probe's file (removed at once, never replayed)


def spool_dir() -> Path:
    path = Path(settings.GATEWAY["LEDGER_SPOOL_DIR"])
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- serializing an entry and its budget ------------------------------------------------------


def _encode(entry, budget: BudgetState | None) -> bytes:
    record = {
        "entry": {
            **asdict(entry),
            "megapixels": str(entry.megapixels) if entry.megapixels is not None else None,
            "created_at": entry.created_at.isoformat(),
        },
        "budget": None if budget is None else _encode_budget(budget),
    }
    return orjson.dumps(record) + b"\n"


def _encode_budget(budget: BudgetState) -> dict:
    encoded: dict = {
        "config": asdict(budget.config),
        "key": {**asdict(budget.key), "window_start": budget.key.window_start.isoformat()},
        "wallet_id": budget.wallet_id,
        "spent": budget.spent,
    }
    if budget.levels:  # a course member's levels, charged again on replay
        encoded["levels"] = [_encode_budget(level) for level in budget.levels]
    return encoded


def _decode_budget(raw: dict) -> BudgetState:
    key = {**raw["key"], "window_start": datetime.fromisoformat(raw["key"]["window_start"])}
    return BudgetState(
        config=BudgetConfig(**raw["config"]),
        key=WalletKey(**key),
        wallet_id=raw["wallet_id"],
        spent=raw["spent"],
        levels=tuple(_decode_budget(level) for level in raw.get("levels", ())),
    )


def _decode(line: bytes):
    record = orjson.loads(line)
    fields = record["entry"]
    fields["created_at"] = datetime.fromisoformat(fields["created_at"])
    if fields["megapixels"] is not None:
        fields["megapixels"] = Decimal(fields["megapixels"])
    raw = record["budget"]
    if raw is None:  # a refusal: no wallet
        return LedgerEntry(**fields), None
    return LedgerEntry(**fields), _decode_budget(raw)


# --- writing ----------------------------------------------------------------------------------

_sequence = 0


def _own_path() -> Path:
    return spool_dir() / f"{os.getpid()}-{_sequence}.jsonl"


def spool_append(*, entry, budget: BudgetState) -> None:
    """Append one entry durably (written and fsync'ed before this returns)."""
    spool_append_many([(entry, budget)])


def spool_append_many(items: list) -> None:
    """Append (entry, budget) pairs durably, in one write and one fsync."""
    global _sequence
    data = b"".join(_encode(entry, budget) for entry, budget in items)
    while True:
        path = _own_path()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # claimed by a replayer meanwhile: write a new file
                _sequence += 1
                continue
            os.write(fd, data)
            os.fsync(fd)
            _mark_pending()
        finally:
            os.close(fd)  # also releases the lock
        _fsync_dir(path.parent)
        for entry, _ in items:
            logger.warning(
                "ledger row of request %s spooled to %s (database unavailable)",
                entry.request_id,
                path.name,
            )
        return


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _waiting_file(path: Path) -> bool:
    """A file of entries to replay: a writer's `.jsonl` or a claimed `.replaying-` one; never
    `rejected.jsonl` (entries refused for good wait for an operator, not for a replay) nor the
    writability probe."""
    if path.name == REJECTED:
        return False
    return path.suffix == ".jsonl" or ".replaying-" in path.name


def _lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def spool_depth() -> int:
    """Entries waiting in the spool (lines in its files), rejected ones not included."""
    return sum(_lines(path) for path in spool_dir().iterdir() if _waiting_file(path))


def spool_rejected() -> int:
    """Entries the database refused for good, kept in `rejected.jsonl` for an operator."""
    path = spool_dir() / REJECTED
    return _lines(path) if path.exists() else 0


def register_gauges() -> None:
    """The spool's depths as /metrics gauges, read when scraped (called by licensing's ready())."""
    metrics.register_gauge_source(
        "gateway_ledger_spool_entries",
        "Ledger entries waiting in this host's spool for the database.",
        spool_depth,
    )
    metrics.register_gauge_source(
        "gateway_ledger_spool_rejected_entries",
        "Spooled ledger entries the database refused for good (rejected.jsonl).",
        spool_rejected,
    )


def encoded_line(entry, budget: BudgetState | None) -> str:
    """An entry as its spool line (for the log line of an entry no spool could take: an operator
    can append it to a spool file and replay it)."""
    return _encode(entry, budget).decode().rstrip("\n")


# --- can the spool take an entry? (asked before a provider call while the database is down) ----


class SpoolProbe:
    """Whether the spool can take an entry: its directory opens a file for append and its disk
    has LEDGER_SPOOL_MIN_FREE_BYTES free. The answer is kept LEDGER_SPOOL_PROBE_SECONDS (by
    `clock`, injectable) so that a flood of requests during an outage costs one probe a second."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.checked_at: float | None = None
        self.problem = ""  # why the spool cannot take an entry; "" when it can

    def writable(self) -> bool:
        interval = settings.GATEWAY["LEDGER_SPOOL_PROBE_SECONDS"]
        if self.checked_at is None or self.clock() - self.checked_at >= interval:
            self.refresh()
        return not self.problem

    def refresh(self) -> None:
        self.checked_at = self.clock()
        try:
            directory = spool_dir()
            probe_file = directory / f"{PROBE}-{os.getpid()}"
            os.close(os.open(probe_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
            probe_file.unlink()  # nothing left behind for a replay or an operator to wonder at
            stat = os.statvfs(directory)
        except OSError as exc:  # not a directory, no permission, read-only file system...
            self.problem = f"cannot write to {settings.GATEWAY['LEDGER_SPOOL_DIR']}: {exc}"
        else:
            free = stat.f_bavail * stat.f_frsize
            needed = settings.GATEWAY["LEDGER_SPOOL_MIN_FREE_BYTES"]
            self.problem = f"{free} bytes free, {needed} needed" if free < needed else ""
        if self.problem:
            logger.critical("the ledger spool cannot take entries: %s", self.problem)


probe = SpoolProbe()
_database_down = False  # the last ledger write (or health check) of this process failed


def note_database_down() -> None:
    """The outage path was taken: from now on each provider call first asks the spool."""
    global _database_down
    if not _database_down:
        _database_down = True
        probe.checked_at = None  # probe afresh: the disk may have filled since the last outage


def note_database_up() -> None:
    global _database_down
    _database_down = False


def spool_refuses() -> bool:
    """True when a provider call could not be recorded: the database is down and the spool
    cannot take its row. One global read while the database is up."""
    return _database_down and not probe.writable()


# --- replaying --------------------------------------------------------------------------------


def _claim(path: Path) -> Path | None:
    """Rename a spool file to a name of ours, so that no writer appends to it any more."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # a writer is in the middle of an append: next round
        if not _still_named(path, fd):
            return None  # a sibling worker claimed it between our open and our lock
        claimed = path.with_name(f"{path.name}.replaying-{os.getpid()}-{time.monotonic_ns()}")
        os.rename(path, claimed)
        return claimed
    finally:
        os.close(fd)


def _replay_file(path: Path, record: Record) -> tuple[int, int]:
    """Apply every entry of a claimed file; returns (written, skipped). The file is removed once
    all its entries are in; on a database outage it stays for the next round."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0, 0  # a sibling worker replayed it and removed it since we listed the folder
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0, 0  # another replayer has it
        if not _still_named(path, fd):
            return 0, 0  # replayed and removed by a sibling between our open and our lock
        with os.fdopen(os.dup(fd), "rb") as f:
            lines = f.read().splitlines()
        written = skipped = 0
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            replayed = _replay_line(path, number, line, record)
            if replayed is True:
                written += 1
            elif replayed is False:
                skipped += 1
        os.unlink(path)
        return written, skipped
    finally:
        os.close(fd)


def _replay_line(path: Path, number: int, line: bytes, record: Record) -> bool | None:
    """One spooled entry through `record`: True written, False already there, None kept in
    the rejected file (unreadable, or refused for good). An outage propagates: the file stays
    for the next round."""
    try:
        entry, budget = _decode(line)
    except (ValueError, KeyError, TypeError):
        # Only a write cut short by a crash can leave a broken line (the last one).
        logger.error("ledger spool %s line %d is unreadable; skipped", path.name, number)
        _keep_rejected(path, line)
        return None
    try:
        written = bool(record(entry=entry, budget=budget))
    except UNAVAILABLE:
        raise
    except Exception:  # refused for good (not an outage): kept for an operator
        logger.exception("ledger spool entry %s refused", entry.request_id)
        _keep_rejected(path, line)
        return None
    crashpoints.reached("spool.replayed")
    return written


def _still_named(path: Path, fd: int) -> bool:
    """Whether `path` still names the file open as `fd`. Workers replay the same folder (each
    at start, and after its writes): one may claim or finish a file between another's listing,
    open and lock; that is no error (issue 35: `FileNotFoundError ...replaying-...` at ERROR)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _keep_rejected(path: Path, line: bytes) -> None:
    """Entries the database refuses for good are kept for an operator, never dropped."""
    rejected = path.parent / REJECTED
    with open(rejected, "ab") as f:
        f.write(line.rstrip(b"\n") + b"\n")
        f.flush()
        os.fsync(f.fileno())


def replay_files(record: Record) -> tuple[int, int]:
    """Write every spooled entry to the database by `record` (the ledger's door for a replay,
    licensing.ledger.actions.spool_replay); returns (written, already there).

    Raises OperationalError/InterfaceError when the database is still unavailable."""
    from django.db import connection

    if connection.errors_occurred:
        connection.close_if_unusable_or_obsolete()
    directory = spool_dir()
    written = skipped = 0
    for path in sorted(directory.iterdir()):
        if not _waiting_file(path):
            continue
        claimed = _claim(path) if path.suffix == ".jsonl" else path
        if claimed is None:
            continue
        w, s = _replay_file(claimed, record)
        written, skipped = written + w, skipped + s
    if written or skipped:
        logger.warning("ledger spool replayed: %d rows written, %d already there", written, skipped)
    return written, skipped


def spool_pending() -> bool:
    try:
        return any(_waiting_file(p) for p in spool_dir().iterdir())
    except OSError:  # no spool directory (or one that cannot be made): nothing to replay
        return False


# --- the replay at a worker's start (a thread, before any request) ----------------------------


def replay_at_start(replay: Callable[[], tuple[int, int]]) -> threading.Thread | None:
    """Called once by each worker as it starts (gateway_site.gunicorn_conf): what a previous
    process left in the spool (a crash, a restart during an outage) is written now, not when
    this worker's first charged request ends (issue 35). On a thread of its own, backing off
    while the database is unavailable, until the spool is empty; None when it is already."""
    if not spool_pending():
        return None
    thread = threading.Thread(
        target=_replay_until_empty, args=(replay,), name="ledger-spool-at-start", daemon=True
    )
    thread.start()
    return thread


def _replay_until_empty(replay: Callable[[], tuple[int, int]], sleep=time.sleep) -> None:
    from django.db import connections

    delay = 0.25
    try:
        while spool_pending():
            try:
                replay()
            except UNAVAILABLE:
                sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            except Exception:  # pragma: no cover - logged; the request path's replay goes on
                logger.exception("ledger spool replay at start failed")
                return
            note_database_up()
            return  # what is left was written meanwhile: the request path replays it
    finally:
        connections.close_all()  # this thread's connection, back to the pool


# --- the automatic replayer (one asyncio task per process) -------------------------------------

_replayer: asyncio.Task | None = None
_pending: bool | None = None  # None: the directory was not looked at yet in this process


def _mark_pending() -> None:
    global _pending
    _pending = True


def replay_soon(replay: Callable[[], tuple[int, int]]) -> None:
    """Called after every ledger write (licensing.ledger.actions): starts this process's replay
    loop, which runs `replay` on a worker thread until the spool is empty, when something is
    spooled (also what a previous process left behind); one global read otherwise."""
    global _pending, _replayer
    if _pending is None:
        _pending = spool_pending()
    if _pending and (_replayer is None or _replayer.done()):
        _replayer = asyncio.get_running_loop().create_task(_replay_loop(replay))


async def _replay_loop(replay: Callable[[], tuple[int, int]]) -> None:
    delay = 0.25
    while True:
        await asyncio.sleep(delay)
        try:
            await run_db(replay)
        except UNAVAILABLE:
            delay = min(delay * 2, 5.0)
            continue
        except Exception:  # pragma: no cover - logged, retried
            logger.exception("ledger spool replay failed")
            delay = 5.0
            continue
        note_database_up()
        if not spool_pending():
            global _pending
            _pending = False
            return
