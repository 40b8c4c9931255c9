"""`uvicorn floor_site.asgi:application --app-dir bench`"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "floor_site.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

application = get_asgi_application()
