"""``Idempotency-Key`` on the API's POSTs (docs/api.md, "Idempotency").

A view that mixes in ``IdempotentMixin`` (every API view does, through the bases in
``portal.api_views``) runs a POST carrying a key once per caller and key:
the first request claims the key, runs, and stores its answer in the same transaction; a
retry with the same body gets that answer again with ``Idempotent-Replayed: true``.

The claim is a row inserted under a unique (owner, key) constraint inside the transaction
that runs the view. PostgreSQL makes a second insert of the same key wait until the first
transaction ends, so a concurrent retry waits for the first request (at most
IDEMPOTENCY_WAIT_SECONDS, then 409 ``idempotency_in_progress``) and then replays its
answer. If the first request fails (an exception, a 4xx or 5xx answer) nothing of the key
is kept and a retry runs again; a crash rolls the claim back with the work.

The stored answer is plain JSON: a POST whose answer carries a secret (a new API token's
key) refuses the header (``IdempotentMixin.idempotency_refused``) rather than keep it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.http import QueryDict
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from portal.claims import insert_once
from portal.models import IdempotencyRecord

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's lock_timeout


class IdempotencyKeyReused(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = _("This Idempotency-Key was already used with a different request.")
    default_code = "idempotency_key_reused"


class IdempotencyInProgress(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = _("A request with this Idempotency-Key is still running. Retry shortly.")
    default_code = "idempotency_in_progress"
    wait = 1  # Retry-After


SECRET_ANSWER = _(
    "Making an API token does not take an Idempotency-Key: the answer holds the token's key, "
    "which is shown once and never stored. Send the request without the header; a retry "
    "makes another token."
)


def ttl() -> timedelta:
    return timedelta(hours=settings.IDEMPOTENCY_KEY_HOURS)


def key_of(request: Request) -> str | None:
    """The request's key, None without the header; a 400 for an empty or overlong one."""
    key = request.headers.get(HEADER)
    if key is None:
        return None
    key = key.strip()
    if not key:
        raise exceptions.ValidationError({HEADER: [_("The Idempotency-Key must not be empty.")]})
    if len(key) > MAX_KEY_LENGTH:
        raise exceptions.ValidationError(
            {HEADER: [_("The Idempotency-Key has at most 255 characters.")]}
        )
    return key


def fingerprint(request: Request) -> str:
    """The same method, path and body give the same value, whatever the keys' order."""
    data = request.data
    if isinstance(data, QueryDict):
        data = {name: data.getlist(name) for name in sorted(data)}
    body = json.dumps(data, cls=JSONEncoder, sort_keys=True, default=str)
    text = f"{request.method} {request.get_full_path()}\n{body}"
    return hashlib.sha256(text.encode()).hexdigest()


def _insert(owner_id: int, key: str, digest: str, request: Request) -> IdempotencyRecord | None:
    """The key's new row, or None when one is there (a concurrent insert of the same key
    waits for that transaction, within the lock timeout, then finds it)."""
    record = IdempotencyRecord(
        owner_id=owner_id, key=key, fingerprint=digest, method=request.method,
        path=request.get_full_path()[:2048], created=timezone.now(),
    )  # fmt: skip
    return record if insert_once(record) else None


def _claim(
    owner_id: int, key: str, digest: str, request: Request
) -> tuple[IdempotencyRecord, bool]:
    """Insert the key's row, or lock the one there: the row, and whether it holds a finished
    answer to replay (False: this request claimed the key and runs)."""
    wait_ms = int(settings.IDEMPOTENCY_WAIT_SECONDS * 1000)
    try:
        with transaction.atomic():  # a savepoint: a lock timeout is undone alone
            with connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = {wait_ms}")
            record = _insert(owner_id, key, digest, request)
            created = record is not None
            if not created:
                record = IdempotencyRecord.objects.select_for_update().get(
                    owner_id=owner_id, key=key
                )
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout TO DEFAULT")
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == LOCK_NOT_AVAILABLE:
            raise IdempotencyInProgress() from exc
        raise
    if created:
        return record, False
    if record.created < timezone.now() - ttl():  # expired, not yet pruned: a fresh claim
        record.fingerprint, record.created = digest, timezone.now()
        record.method, record.path = request.method, request.get_full_path()[:2048]
        record.save()
        return record, False
    if record.fingerprint != digest:
        raise IdempotencyKeyReused()
    return record, True


def run(request: Request, key: str, call: Callable[[], Response]) -> Response:
    """Run ``call`` once for the caller's ``key``, or replay the answer it gave."""
    digest = fingerprint(request)
    with transaction.atomic():
        record, finished = _claim(request.user.pk, key, digest, request)
        if finished:
            data = json.loads(record.body) if record.body else None
            return Response(data, status=record.status_code, headers={REPLAYED_HEADER: "true"})
        response = call()
        # The claim's own row: this transaction inserted (or locked) it, nobody changed it.
        if status.is_success(response.status_code):
            record.status_code = response.status_code
            record.body = json.dumps(response.data, cls=JSONEncoder) if response.data else ""
            record.save(update_fields=["status_code", "body"])
        else:  # only a success is kept: a refused request may be tried again with its key
            record.delete()
        return response


# For DRF views: a POST with an ``Idempotency-Key`` runs once per caller and key. (A comment,
# not a docstring: drf-spectacular publishes the first docstring up a view's classes as the
# description of its operations that have none.)
class IdempotentMixin:
    # A viewset's actions whose POST refuses a key with a 400 instead: those whose answer
    # carries a secret shown once (a new API token's key), which the record would keep in
    # plain text for IDEMPOTENCY_KEY_HOURS. Refused rather than ignored, so that a client
    # counting on the key learns at once that a retry makes another.
    idempotency_refused: frozenset[str] = frozenset()
    # What the 400 says: which secret the answer holds.
    idempotency_refused_message = SECRET_ANSWER

    def initial(self, request: Request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)  # authenticated, allowed, not throttled
        if request.method != "POST" or not request.user.is_authenticated:
            return
        key = key_of(request)
        handler = getattr(self, "post", None)
        if key is None or handler is None:
            return
        if getattr(self, "action", None) in self.idempotency_refused:
            raise exceptions.ValidationError({HEADER: [self.idempotency_refused_message]})
        # dispatch() looks the handler up after initial(): it gets this wrapped one.
        self.post = lambda req, *a, **kw: run(req, key, lambda: handler(req, *a, **kw))


def honours_key(view_class: type, action: str | None) -> bool:
    """Whether a POST to ``view_class`` (a viewset's ``action``) runs once per key."""
    return issubclass(view_class, IdempotentMixin) and (
        action not in view_class.idempotency_refused
    )


def prune(now=None) -> int:
    """Forget keys older than IDEMPOTENCY_KEY_HOURS; how many were deleted."""
    cutoff = (now or timezone.now()) - ttl()
    deleted, _rows = IdempotencyRecord.objects.filter(created__lt=cutoff).delete()
    return deleted
