"""``manage.py ensure_admin``: the first platform administrator, from the environment
(Django's own names: DJANGO_SUPERUSER_USERNAME, DJANGO_SUPERUSER_PASSWORD,
DJANGO_SUPERUSER_EMAIL), for a deployment's start-up. Unlike ``createsuperuser
--noinput`` it may run at every start: an existing user is left as it is (its password is
never reset from the environment), and a password the validators refuse is refused."""

from __future__ import annotations

import os

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _


class Command(BaseCommand):
    help = _("Create the platform administrator named in DJANGO_SUPERUSER_USERNAME once.")

    def handle(self, *args, **options) -> None:
        username = os.environ.get("DJANGO_SUPERUSER_USERNAME", "").strip()
        password = os.environ.get("DJANGO_SUPERUSER_PASSWORD", "")
        email = os.environ.get("DJANGO_SUPERUSER_EMAIL", "").strip()
        if not username:
            raise CommandError(_("DJANGO_SUPERUSER_USERNAME is not set."))
        users = get_user_model()
        exists = _("%(user)s exists; left as it is.") % {"user": username}
        if users.objects.filter(username=username).exists():
            self.stdout.write(exists)
            return
        if not password:
            raise CommandError(_("DJANGO_SUPERUSER_PASSWORD is not set."))
        user = users(username=username, email=email, is_staff=True, is_superuser=True)
        try:
            validate_password(password, user)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from None
        user.set_password(password)
        try:
            with transaction.atomic():
                user.save()
        except IntegrityError:  # another start made it meanwhile (two replicas at once)
            self.stdout.write(exists)
            return
        self.stdout.write(_("Created the administrator %(user)s.") % {"user": username})
