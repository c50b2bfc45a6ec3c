"""The one Celery application; tasks live in each app's ``tasks.py``."""

import os

from celery import Celery

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


@app.on_after_configure.connect
def add_requests_beat(sender: Celery, **kwargs) -> None:
    sender.conf.beat_schedule = {**(sender.conf.beat_schedule or {}), **REQUESTS_BEAT}
