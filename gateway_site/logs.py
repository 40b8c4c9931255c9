"""Log lines: JSON (one object per line, for log shipping) or readable text, every line with the
request id of the request it was written for (LOG_FORMAT; docs/configuration.md).

The request id travels in a context variable set by gateway_site.middleware: a line written
anywhere below a request (a provider warning, a ledger error) carries it, and so do tasks the
request started. Lines written outside any request have `request_id` null.
"""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar
from datetime import UTC, datetime

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = request_id.get()
        return True


class JsonFormatter(_JsonFormatter):
    """{"time", "level", "logger", "message", "request_id", ...the record's extra fields}."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("json_ensure_ascii", False)
        super().__init__(*args, **kwargs)

    def add_fields(self, log_record: dict, record: logging.LogRecord, message_dict: dict) -> None:
        super().add_fields(log_record, record, message_dict)
        log_record["time"] = datetime.fromtimestamp(record.created, UTC).isoformat(
            timespec="milliseconds"
        )
        log_record["level"] = record.levelname
        log_record["logger"] = record.name
        log_record["request_id"] = getattr(record, "request_id", None)
        # The standard fields first, then the record's own (the access log's method, path...).
        ordered = {k: log_record.pop(k) for k in ("time", "level", "logger", "message")}
        ordered["request_id"] = log_record.pop("request_id")
        ordered.update(log_record)
        log_record.clear()
        log_record.update(ordered)


class TextFormatter(logging.Formatter):
    """`2026-11-23 20:50:01.123 INFO gateway.access [<request id>] <message>` for a terminal."""

    converter = staticmethod(time.gmtime)  # UTC, like everything else the gateway shows

    FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s [%(request_id)s] %(message)s"

    def __init__(self):
        super().__init__(self.FORMAT, "%Y-%m-%d %H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "request_id", None) is None:
            record.request_id = "-"
        return super().format(record)
