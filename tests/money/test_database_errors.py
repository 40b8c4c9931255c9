"""No database error on the request path is a 500 (docs/reliability.md): besides an outage
(OperationalError, tested with the spool), a statement the server refuses (a prepared statement a
transaction pooler lost, issue 35) answers the spec's retryable 503."""

from __future__ import annotations

import django.db
import psycopg
import pytest

from inference import pipeline
from tests.kit import error

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"model": "text-embedding-3-small", "input": "hello", "encoding_format": "float"}


@pytest.mark.parametrize(
    "raised",
    [
        psycopg.errors.InvalidSqlStatementName('prepared statement "_pg3_4" does not exist'),
        psycopg.errors.DuplicatePreparedStatement('prepared statement "_pg3_0" already exists'),
        django.db.ProgrammingError("relation does not exist"),
        django.db.IntegrityError("duplicate key value"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_a_database_error_in_the_budget_read_is_a_503(client, auth, catalog, monkeypatch, raised):
    async def refused(*args, **kwargs):
        raise raised

    monkeypatch.setattr(pipeline, "budget_check_async", refused)
    response = client.post("/v1/embeddings", headers=auth, json=BODY)
    assert error(response, 503) == "Service temporarily unavailable"
