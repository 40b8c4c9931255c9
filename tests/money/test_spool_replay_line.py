"""licensing.ledger.spool's replay of one line, without a database: written, already there,
kept for an operator, or an outage that stops the round."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import OperationalError

from licensing.ledger.spool import REJECTED, _replay_line, encoded_line
from tests.ledger_helpers import entry_for

LICENSE = SimpleNamespace(id=1)


@pytest.fixture
def spooled(tmp_path):
    line = encoded_line(entry_for(LICENSE, "req-1"), None).encode()
    return tmp_path / "1.jsonl", line


@pytest.mark.parametrize("answer", [True, False])
def test_the_record_says_written_or_already_there(spooled, answer):
    path, line = spooled
    seen = []

    def record(*, entry, budget):
        seen.append((entry.request_id, entry.credits, budget))
        return answer

    assert _replay_line(path, 1, line, record) is answer
    assert seen == [("req-1", 7, None)]
    assert not (path.parent / REJECTED).exists()


def test_an_unreadable_line_is_kept_and_not_recorded(spooled):
    path, _line = spooled
    assert _replay_line(path, 3, b'{"entry": ', _never) is None
    assert (path.parent / REJECTED).read_bytes() == b'{"entry": \n'


def test_an_entry_refused_for_good_is_kept(spooled):
    path, line = spooled

    def record(*, entry, budget):
        raise ValueError("refused")

    assert _replay_line(path, 1, line, record) is None
    assert (path.parent / REJECTED).read_bytes() == line + b"\n"


def test_an_outage_propagates_and_keeps_nothing(spooled):
    path, line = spooled

    def record(*, entry, budget):
        raise OperationalError("down")

    with pytest.raises(OperationalError):
        _replay_line(path, 1, line, record)
    assert not (path.parent / REJECTED).exists()


def _never(*, entry, budget):
    raise AssertionError("not recorded")
