"""``manage.py import_nodes FILE``: the node import page's rules from a shell or a
deployment's start-up (docker-compose.yml registers its simulator this way).

All or nothing, as on the page: any invalid row and nothing is written. With ``--update``
rows naming registered nodes change them, so running it again is harmless."""

from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils.translation import gettext as _

from agents import node_files, registration


class Command(BaseCommand):
    help = _("Register agent nodes from a CSV or YAML file, as Nodes → Import does.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", type=Path, help=_("a .csv, .yaml or .yml file"))
        parser.add_argument(
            "--update", action="store_true",
            help=_("change the nodes the file names that are registered already"),
        )  # fmt: skip
        parser.add_argument("--dry-run", action="store_true", help=_("check only, write nothing"))
        parser.add_argument(
            "--token-env", metavar="NAME",
            help=_("the agent token for rows without one, from this environment variable"),
        )  # fmt: skip

    def handle(self, *args, file: Path, update: bool, dry_run: bool, token_env: str | None,
               **options) -> None:  # fmt: skip
        fmt = "csv" if file.suffix.lower() == ".csv" else "yaml"
        if file.suffix.lower() not in {".csv", ".yaml", ".yml"}:
            raise CommandError(_("%(file)s: give a .csv, .yaml or .yml file.") % {"file": file})
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{file}: {exc}") from None
        try:
            rows = node_files.parse(text, fmt, update=update)
        except node_files.ParseError as exc:
            raise CommandError(f"{file}: {exc}") from None
        if token_env:
            token = os.environ.get(token_env, "").strip()
            if not token:
                raise CommandError(_("%(name)s is not set.") % {"name": token_env})
            rows = [row if row.get("token") else {**row, "token": token} for row in rows]
        report = registration.import_nodes(rows, dry_run=dry_run, update=update)
        if not report.ok:
            for error in report.errors:
                where = _("row %(row)s") % {"row": error.row} if error.row else str(file)
                field = f" {error.field}:" if error.field else ""
                self.stderr.write(f"{where}:{field} {error.message}")
            raise CommandError(_("Nothing was imported."))
        counts = {"created": len(report.created), "updated": len(report.updated),
                  "unchanged": len(report.unchanged)}  # fmt: skip
        if dry_run:
            text = _("Would create %(created)s, update %(updated)s, leave %(unchanged)s as they "
                     "are (dry run: nothing written).")  # fmt: skip
        else:
            text = _("Created %(created)s, updated %(updated)s, left %(unchanged)s as they are.")
        self.stdout.write(text % counts)
