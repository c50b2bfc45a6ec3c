from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _

from agents import readings
from agents.choices import GpuHealth, NodeState


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    nodes = readings.fleet_payload()
    return render(
        request,
        "agents/dashboard.html",
        {
            "nodes": nodes,
            "gpu_count": sum(len(n["gpus"]) for n in nodes),
            "state_labels": {value: str(label) for value, label in NodeState.choices},
            "health_labels": {value: str(label) for value, label in GpuHealth.choices},
            "ui_labels": {
                "live": _("Live"),
                "reconnecting": _("Reconnecting…"),
                "never": _("never"),
                "seconds_ago": _("%(seconds)s s ago"),
            },
        },
    )
