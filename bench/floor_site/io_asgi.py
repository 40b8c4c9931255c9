"""The I/O floor's server entry: the floor's app behind the gateway's own ASGI handler
(gateway_site/handler.py: no per-request OS thread on /v1, the same disconnect race), so that
the I/O floor differs from the gateway only by the gateway's own work (bench/README).

    PYTHONPATH=bench gunicorn -c python:gateway_site.gunicorn_conf floor_site.io_asgi:application
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "floor_site.settings")

import django  # noqa: E402

django.setup(set_prefix=False)

from gateway_site.handler import GatewayASGIHandler  # noqa: E402

application = GatewayASGIHandler()
