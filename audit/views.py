"""The audit log page for platform admins: filter, page through, read each change as a
diff, export what the filters chose as CSV."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone

from audit.choices import AuditAction
from audit.diff import diff_rows
from audit.filtersets import AuditEntryFilterSet
from audit.models import AuditEntry
from audit.permissions import can_read_audit
from portal.security import allowed_if

PAGE_SIZE = 50
# The filters the page shows; the API's others (actor_id, after, before) work here too.
PAGE_FILTERS = ("actor", "action", "target_type", "target_id", "tenant", "since", "until")
# An export is one streamed query; past this many rows, narrow the filters.
EXPORT_MAX_ROWS = 100_000
EXPORT_COLUMNS = [
    "id", "at", "actor_id", "actor_name", "address", "action", "target_type", "target_id",
    "target_repr", "tenant_id", "before", "after", "message",
]  # fmt: skip
# A spreadsheet runs a cell that starts with one of these as a formula; the log holds what
# callers typed (a failed login's user name), so such a cell is written as text.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

# Signed in (else the login page) and allowed to read the log (else 403).
audit_readers_only = allowed_if(can_read_audit)


@audit_readers_only
def entry_list(request: HttpRequest) -> HttpResponse:
    filterset = AuditEntryFilterSet(request.GET or None, queryset=AuditEntry.objects.all())
    entries = filterset.qs if filterset.is_bound else AuditEntry.objects.order_by("-at", "-id")
    if filterset.is_bound and not filterset.is_valid():
        entries = AuditEntry.objects.none()
    page = Paginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [(entry, diff_rows(entry.before, entry.after)) for entry in page]
    context = {
        "filterset": filterset,
        "form": filterset.form,
        "fields": [filterset.form[name] for name in PAGE_FILTERS],
        "page": page,
        "rows": rows,
        "actions": AuditAction.values,
        "filtered": any(v for k, v in request.GET.items() if k != "page"),
    }
    return render(request, "audit/entry_list.html", context)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


class _Echo:
    def write(self, value: str) -> str:
        return value


@audit_readers_only
def entry_export(request: HttpRequest) -> HttpResponse:
    filterset = AuditEntryFilterSet(request.GET or None, queryset=AuditEntry.objects.all())
    if filterset.is_bound and not filterset.is_valid():
        return HttpResponse(
            json.dumps(filterset.errors), status=400, content_type="application/json"
        )
    entries = filterset.qs if filterset.is_bound else AuditEntry.objects.order_by("-at", "-id")
    values = entries.values_list(*EXPORT_COLUMNS)[:EXPORT_MAX_ROWS]

    def lines() -> Iterator[str]:
        writer = csv.writer(_Echo())
        yield writer.writerow(EXPORT_COLUMNS)
        for row in values.iterator(chunk_size=2000):
            yield writer.writerow([_cell(value) for value in row])

    stamp = timezone.localtime().strftime("%Y%m%d-%H%M%S")
    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
    return response
