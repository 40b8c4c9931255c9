#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")
    # A command is one short session: no connection pool, whose background reconnects would
    # also print a warning per attempt before the one line below (gateway_site.settings).
    os.environ.setdefault("GATEWAY_PG_ORM_POOL", "off")
    from core.config import exit_on_bad_environment

    # Every bad value in the environment, one line each ("manage.py: NAME: problem: 'value'").
    exit_on_bad_environment("manage.py")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line
    from django.db.utils import InterfaceError, OperationalError

    try:
        execute_from_command_line(sys.argv)
    except (ImproperlyConfigured, OperationalError, InterfaceError) as exc:
        # A bad DATABASE_URL or an unreachable database: one line, not a traceback.
        if "--traceback" in sys.argv:
            raise
        sys.exit(f"manage.py: {one_line(exc)}")


def one_line(exc: Exception) -> str:
    from django.db.utils import Error as DatabaseError

    message = " ".join(str(exc).split()) or exc.__class__.__name__
    if isinstance(exc, DatabaseError):
        return f"the database is unreachable or refused the connection ({message})"
    return message


if __name__ == "__main__":
    main()
