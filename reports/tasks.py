"""Beat's work for the reports (scheduled in portal/celery.py). Each is idempotent: the
scan replaces its snapshot, the reclaim step acts once per lease and warning."""

from __future__ import annotations

from celery import shared_task

from reports import digest, scan, services


@shared_task(ignore_result=True)
def scan_and_reclaim() -> dict[str, int]:
    """Judge every allocation and card, then warn, withdraw and release per policy."""
    result = scan.scan()
    return {"allocations": result.allocations, "idle": result.idle, **services.reclaim()}


@shared_task(ignore_result=True)
def send_idle_digest() -> int:
    """The daily idle report, as a signal for the alerts app to deliver."""
    return len(digest.send()["tenants"])
