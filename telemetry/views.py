from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from agents.choices import GpuHealth, GpuVendor, NodeState, vendor_label
from agents.models import GPU, Node
from agents.permissions import can_see_agent_details
from telemetry import heatmap, readings
from telemetry.history import RANGES
from telemetry.panels import (
    DashboardFigure,
    dashboard_detour,
    dashboard_figures,
    dashboard_panels,
)
from telemetry.slices import may_see_owners, slices_report


def _labels() -> dict:
    """Translated words the page scripts need, handed over as JSON."""
    return {
        "states": {value: str(label) for value, label in NodeState.choices},
        "health": {value: str(label) for value, label in GpuHealth.choices},
        "vendors": {value: str(label) for value, label in GpuVendor.choices},
        "ui": {
            "live": _("Live"),
            "reconnecting": _("Reconnecting…"),
            "never": _("never"),
            "seconds_ago": _("%(seconds)s s ago"),
            "no_data": _("No history yet for this range."),
            "utilization": _("Utilization (%)"),
            "memory": _("Memory used (GiB)"),
            "power": _("Power (W)"),
            "temperature": _("Temperature (°C)"),
            "average": _("average"),
            "peak": _("peak"),
            "time": _("Time"),
            "agent_error": _("Agent error"),
            "heat_cell": _("%(node)s · GPU %(index)s: %(value)s"),
            "no_reading": _("no reading"),
            "percent": _("%(value)s %%"),
        },
    }


def _figures(counts: heatmap.Counts, nodes: int) -> list[DashboardFigure]:
    """Telemetry's own numbers in the summary row; the apps add theirs (allocated, alerts)."""
    threshold = {"pct": heatmap.BUSY_UTIL_PCT}
    figures = [
        DashboardFigure(
            _("GPUs"), str(counts.cards), order=10,
            detail=ngettext("on %(count)s node", "on %(count)s nodes", nodes) % {"count": nodes},
        ),
        DashboardFigure(_("Busy"), str(counts.busy), order=30,
                        detail=_("≥ %(pct)s %% utilization") % threshold),
        DashboardFigure(_("Idle"), str(counts.idle), order=40,
                        detail=_("< %(pct)s %% utilization") % threshold),
    ]  # fmt: skip
    if counts.silent:  # known before the page is drawn: the row never grows live
        figures.append(DashboardFigure(_("No reading"), str(counts.silent), order=45,
                                       detail=_("agent silent"),
                                       tone="warning"))  # fmt: skip
    return figures


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    if detour := dashboard_detour(request):  # e.g. a developer's home, from the app above
        return redirect(detour)
    tiles, errors = readings.node_summaries_and_errors()
    # The agents' own error texts only for node managers; others see "Agent error".
    details = can_see_agent_details(request.user)
    by_state: dict[str, int] = {}
    models: dict[str, int] = {}
    vendors: dict[str, str] = {}  # {model: vendor}; a model not listed is NVIDIA's
    for tile in tiles:
        by_state[tile["state"]] = by_state.get(tile["state"], 0) + 1
        for model, count in tile["models"].items():
            models[model] = models.get(model, 0) + count
        vendors.update(tile.get("vendors") or {})
    # The heatmap's cards: one query for the fleet's (id, node, index), none per node.
    gpus = GPU.objects.values_list("pk", "node_id", "index")
    nodes = heatmap.heat_nodes(tiles, gpus.iterator(chunk_size=10_000))
    card_count = sum(len(node.cells) for node in nodes)
    return render(
        request,
        "telemetry/dashboard.html",
        {
            "figures": dashboard_figures(request, _figures(heatmap.counts(tiles), len(tiles))),
            "heatmap": heatmap.render(nodes),
            "heatmap_dense": card_count > heatmap.DENSE_AFTER_CARDS,
            "heatmap_cards": card_count,
            "tiles": tiles,
            "gpu_count": sum(t["gpu_count"] for t in tiles),
            "by_state": [(NodeState(s).label, n) for s, n in sorted(by_state.items())],
            "models": [
                (model, count, vendor_label(vendors.get(model, GpuVendor.NVIDIA)))
                for model, count in sorted(models.items(), key=lambda item: -item[1])
            ],
            "labels": _labels(),
            "can_manage_nodes": details,
            "agent_errors": {str(pk): text for pk, text in errors.items()} if details else None,
            "panels": dashboard_panels(request),
        },
    )


@login_required
def node_detail(request: HttpRequest, pk: int) -> HttpResponse:
    node = get_object_or_404(Node, pk=pk)
    errors = {str(node.pk): node.last_error} if node.last_error else {}
    latest = readings.latest_for([node.pk]).get(node.pk)
    gpu_ids = list(node.gpus.values_list("pk", flat=True))
    return render(
        request,
        "telemetry/node_detail.html",
        {
            "node": node,
            "agent_errors": errors if can_see_agent_details(request.user) else None,
            "detail": readings.node_detail(node, latest),
            "report": slices_report(latest, owners=may_see_owners(request.user, gpu_ids)),
            "ranges": RANGES,
            "labels": _labels(),
        },
    )


@login_required
def gpu_detail(request: HttpRequest, pk: int) -> HttpResponse:
    gpu = get_object_or_404(GPU.objects.select_related("node"), pk=pk)
    latest = readings.latest_for([gpu.node_id]).get(gpu.node_id, {})
    reading = readings.card_reading(latest.get("gpus", {}).get(gpu.uuid, {}))
    used = reading.get("memory_used_mib")
    return render(
        request,
        "telemetry/gpu_detail.html",
        {
            "gpu": gpu,
            "reading": reading,
            "memory_used_gib": None if used is None else used / 1024,
            "memory_total_gib": gpu.memory_total_mib / 1024,
            "report": slices_report(
                latest, owners=may_see_owners(request.user, [gpu.pk]), uuids={gpu.uuid}
            ),
            "last_seen": readings.seen_at(gpu.last_seen, latest, gpu.uuid),
            "ranges": RANGES,
            "labels": _labels(),
        },
    )
