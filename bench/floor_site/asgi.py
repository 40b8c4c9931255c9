"""`PYTHONPATH=bench gunicorn -c python:gateway_site.gunicorn_conf floor_site.asgi:application`
(what bench/run.py runs: the floor served as the gateway is)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "floor_site.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

application = get_asgi_application()
