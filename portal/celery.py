"""The one Celery application; tasks live in each app's ``tasks.py``."""

import os

from celery import Celery
from celery.schedules import crontab

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# GPU requests: placement from the queue on a short beat (it also runs after every
# release), and the timed steps (escalation, expiry, warnings) every minute.
REQUESTS_BEAT = {
    "place-queued-requests": {"task": "quotas.tasks.place_all_queued", "schedule": 15.0,
                              "options": {"expires": 15}},
    "sweep-requests": {"task": "quotas.tasks.sweep_requests", "schedule": 60.0,
                       "options": {"expires": 60}},
}  # fmt: skip


# Reports: the idle scan and the reclaim step every five minutes, the accounting of today
# and yesterday every quarter hour; the idle digest daily
# at 08:00 in the portal's time zone.
REPORTS_BEAT = {
    "scan-idle": {"task": "reports.tasks.scan_and_reclaim", "schedule": 300.0,
                  "options": {"expires": 300}},
    "take-back-borrowed": {"task": "reports.tasks.take_back_borrowed", "schedule": 60.0,
                           "options": {"expires": 60}},
    "account-days": {"task": "reports.tasks.account_days", "schedule": 900.0,
                     "options": {"expires": 900}},
    "idle-digest": {"task": "reports.tasks.send_idle_digest",
                    "schedule": crontab(hour=8, minute=0)},
}  # fmt: skip


# The API: forget Idempotency-Keys older than IDEMPOTENCY_KEY_HOURS.
API_BEAT = {
    "prune-idempotency-keys": {"task": "portal.tasks.prune_idempotency_keys",
                               "schedule": 3600.0, "options": {"expires": 3600}},
}  # fmt: skip


@app.on_after_configure.connect
def add_requests_beat(sender: Celery, **kwargs) -> None:
    sender.conf.beat_schedule = {
        **(sender.conf.beat_schedule or {}),
        **REQUESTS_BEAT,
        **REPORTS_BEAT,
        **API_BEAT,
    }
