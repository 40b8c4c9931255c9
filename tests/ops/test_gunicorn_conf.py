"""gunicorn_conf's worker hook: the spool replay runs where the licensing app is installed, and
a server without it (the bench's floor sites share this config) starts without it."""

from types import SimpleNamespace

from django.apps import apps

from gateway_site import gunicorn_conf
from licensing.ledger import spool

WORKER = SimpleNamespace(pid=1)


def test_a_worker_replays_the_spool_at_start(monkeypatch):
    replays = []
    monkeypatch.setattr(spool, "replay_at_start", replays.append)
    gunicorn_conf.post_worker_init(WORKER)
    assert len(replays) == 1


def test_a_server_without_the_licensing_app_starts_without_a_replay(monkeypatch):
    replays = []
    monkeypatch.setattr(spool, "replay_at_start", replays.append)
    monkeypatch.setattr(apps, "is_installed", lambda name: name != "licensing")
    gunicorn_conf.post_worker_init(WORKER)
    assert replays == []
