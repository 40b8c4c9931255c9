"""A roster sync of N students (default 10,000) through the management API's service, timed and
its queries counted, on a throwaway PostgreSQL database (or SQLite without DATABASE_URL).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gw_bench_roster \\
        .venv/bin/python bench/roster_sync.py [--students 10000]

Four syncs of one course, as an LMS makes them: all new subjects (N end users and members
made), the same list again (nothing to do), half of them replaced (N/2 removed, with a course key
each revoked, N/2 added), and the dry run of the last. Prints the seconds and queries of each.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--students", type=int, default=10_000)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    call_command("migrate", verbosity=0)
    from licensing.access.services import license_create
    from licensing.courses.services import course_key_create, course_roster_sync
    from licensing.models import Course, EndUser

    stamp = str(time.time_ns())
    lic = license_create(name=f"roster-{stamp}", limit=None, period="monthly")
    course = Course.objects.create(
        institution=lic.institution, license=lic, code=f"R{stamp}", name="Roster"
    )
    n = args.students
    first = [f"student-{i}" for i in range(n)]
    second = first[: n // 2] + [f"later-{i}" for i in range(n - n // 2)]

    def run(name: str, students: list, dry_run: bool = False) -> None:
        connection.queries_log.clear()  # a bounded deque: counted from empty
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            plan = course_roster_sync(
                course=course, students=students, dry_run=dry_run, actor_name="bench"
            )
            took = time.perf_counter() - started
        print(
            f"{name:<34} {took:7.2f} s {len(queries):7d} queries  "
            f"added {len(plan.add)} removed {len(plan.remove)} kept {plan.kept}"
        )

    run("new: N students added", first)
    run("again: nothing to do", first)
    for end_user in EndUser.objects.filter(license=lic, subject__in=first[n // 2 :]):
        course_key_create(course=course, end_user=end_user, via="bench")
    run("dry run of half replaced", second, dry_run=True)
    run("half replaced (keys revoked)", second)


if __name__ == "__main__":
    main()
