"""``manage.py create_api_token USER``: an API token for scripts and set-up, printed once."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tokens import services
from tokens.choices import Scope


class Command(BaseCommand):
    help = "Create an API token for a user and print its key (shown this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="what the token is for")
        parser.add_argument("--scope", default=Scope.WRITE, choices=Scope.values)
        parser.add_argument("--days", type=int, help="days until it expires (default: the most)")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}")
        try:
            _token, key = services.create_token(
                user, name=options["name"], scope=options["scope"],
                expires_at=services.expiry_in_days(options["days"]),
            )  # fmt: skip
        except (ValidationError, PermissionError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(key)
