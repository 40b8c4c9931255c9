"""Running ORM code from async views.

Django's own async ORM hops to one shared thread per process (thread_sensitive=True), which
serializes every request's queries. The API instead runs each self-contained block of ORM work
on the executor's thread pool. On PostgreSQL the thread takes a connection from Django's pool
for the block and gives it back after it (a checkout, no new connection), so a process never
holds more than the pool's size however many threads run ORM code; on SQLite each thread keeps
its own persistent connection (a file, no server to crowd).
"""

from functools import partial

from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, connections

# The errors that mean "the database is not there right now" (not a statement it refused).
UNREACHABLE = (OperationalError, InterfaceError)


def _in_thread(fn, args, kwargs):
    connection = connections["default"]
    # A connection broken by an earlier error (server restart, network) is replaced here;
    # a healthy one costs nothing extra.
    if connection.errors_occurred:
        connection.close_if_unusable_or_obsolete()
    try:
        return fn(*args, **kwargs)
    finally:
        if getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
            connection.close()  # back to the pool


_run = sync_to_async(_in_thread, thread_sensitive=False)


async def run_db(fn, /, *args, **kwargs):
    return await _run(fn, args, kwargs)


def db_partial(fn, /, *args, **kwargs):
    return partial(run_db, fn, *args, **kwargs)
