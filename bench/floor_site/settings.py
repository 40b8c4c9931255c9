"""The framework's floor: Django + django-ninja with nothing of the gateway (no DB, no
middleware, no apps), served by gunicorn with the gateway's server settings."""

SECRET_KEY = "bench-floor-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "floor_site.urls"
DATABASES: dict = {}
USE_TZ = True
