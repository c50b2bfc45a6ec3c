"""manage.py doctor: one line per check of this installation (ok, warn, FAIL and what to
do); exits 1 on any FAIL, so a script or a readiness probe can use it. The checks are in
portal.management.doctor; docs/operations.md lists them."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.translation import gettext as _

from portal.management import doctor


class Command(BaseCommand):
    help = "Check the installation: database, Redis, Celery workers and beat, settings, agents."
    requires_system_checks: list[str] = []  # the doctor reports what is wrong, itself

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="One JSON object on stdout.")
        parser.add_argument(
            "--minutes",
            type=float,
            default=5.0,
            help="Nodes must have answered within this many minutes (5).",
        )
        parser.add_argument(
            "--timeout", type=float, default=3.0, help="Seconds each network check may wait (3)."
        )

    def handle(self, *args, **options) -> None:
        if options["minutes"] <= 0 or options["timeout"] <= 0:
            raise CommandError(_("--minutes and --timeout must be positive"))
        results = doctor.run_checks(minutes=options["minutes"], timeout=options["timeout"])
        bad = doctor.failed(results)
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {"ok": not bad, "checks": [r.as_dict() for r in results]},
                    ensure_ascii=False,
                )
            )
        else:
            styles = {
                doctor.OK: self.style.SUCCESS,
                doctor.WARN: self.style.WARNING,
                doctor.FAIL: self.style.ERROR,
            }
            width = max(len(r.name) for r in results)
            for r in results:
                line = f"{styles[r.status](r.status.ljust(4))}  {r.name.ljust(width)}  {r.message}"
                self.stdout.write(
                    line
                    + (
                        f"\n      {' ' * width}  -> {r.hint}"
                        if r.hint and r.status != doctor.OK
                        else ""
                    )
                )
        if bad:
            raise SystemExit(1)
