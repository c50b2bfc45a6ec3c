"""The clusters' pages (platform admins): the list, registering one, and one cluster with
its namespaces, the objects the portal writes there and what the last sync found."""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from agents.choices import GpuHealth
from agents.interface import node_cards
from clusters import services, sync
from clusters.forms import ClusterEditForm, ClusterForm, NamespaceForm
from clusters.models import Cluster, NamespaceMapping, WorkloadState
from portal.security import allowed_if
from quotas.permissions import is_platform_admin

WORKLOADS_SHOWN = 200


@allowed_if(is_platform_admin)
def cluster_list(request: HttpRequest) -> HttpResponse:
    clusters = Cluster.objects.select_related("pool")
    return render(request, "clusters/list.html", {"clusters": clusters})


@allowed_if(is_platform_admin)
@require_http_methods(["GET", "POST"])
def cluster_add(request: HttpRequest) -> HttpResponse:
    form = ClusterForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        cluster = services.register_cluster(actor=request.user, token=data.pop("token"), **data)
        messages.success(request, _("Cluster %(name)s registered.") % {"name": cluster.name})
        return redirect(cluster)
    status = 400 if request.method == "POST" else 200
    return render(request, "clusters/add.html", {"form": form}, status=status)


@allowed_if(is_platform_admin)
@require_http_methods(["GET", "POST"])
def cluster_detail(request: HttpRequest, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.select_related("pool"), pk=pk)
    form = NamespaceForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                services.map_namespace(cluster, actor=request.user, **form.cleaned_data)
            except ValidationError as exc:
                form.add_error(None, exc)
            else:
                messages.success(request, _("Namespace mapped."))
                return redirect(cluster)
        status = 400
    objects = sync.desired_objects(cluster)
    context = {
        "cluster": cluster, "form": form, "mappings": cluster.namespaces.select_related("tenant"),
        "objects": [(o, json.dumps(o, indent=2)) for o in objects],
        # Its live workloads, where they run as read back, and what differs from the books.
        "workloads": cluster.workloads.exclude(state=WorkloadState.ENDED)[:WORKLOADS_SHOWN],
        "nodes": _nodes(cluster),
    }  # fmt: skip
    return render(request, "clusters/detail.html", context, status=status)


def _nodes(cluster: Cluster) -> list[dict]:
    """The cluster's nodes as its page shows them: each with its cards grouped by model and
    memory (how many of each, how many of those not healthy)."""
    rows = list(cluster.nodes.select_related("node"))
    cards = node_cards(r.node_id for r in rows if r.node_id)
    shown = []
    for row in rows:
        groups: dict[tuple[str, int], dict] = {}
        for gpu in cards.get(row.node_id, []):
            group = groups.setdefault((gpu.model, gpu.memory_total_mib),
                                      {"model": gpu.model, "memory_mib": gpu.memory_total_mib,
                                       "count": 0, "lost": 0, "unhealthy": 0})  # fmt: skip
            group["count"] += 1
            group["lost"] += gpu.health == GpuHealth.LOST
            group["unhealthy"] += gpu.health not in (GpuHealth.OK, GpuHealth.LOST)
        shown.append({"row": row, "node": row.node, "groups": list(groups.values()),
                      "count": sum(g["count"] for g in groups.values())})  # fmt: skip
    return shown


@allowed_if(is_platform_admin)
@require_http_methods(["GET", "POST"])
def cluster_edit(request: HttpRequest, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.select_related("pool"), pk=pk)
    form = ClusterEditForm(request.POST or None, instance=Cluster.objects.get(pk=pk))
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        try:
            services.update_cluster(cluster, actor=request.user, token=data.pop("token"), **data)
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, _("Cluster %(name)s saved.") % {"name": data["name"]})
            return redirect(cluster)
    status = 400 if request.method == "POST" else 200
    context = {"cluster": cluster, "form": form, "holding": services.holding(cluster)}
    return render(request, "clusters/edit.html", context, status=status)


@allowed_if(is_platform_admin)
@require_http_methods(["POST"])
def cluster_delete(request: HttpRequest, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster, pk=pk)
    try:
        services.delete_cluster(cluster, actor=request.user)
    except ValidationError as exc:
        messages.error(request, exc.messages[0])
        return redirect(cluster)
    messages.success(request, _("Cluster %(name)s deleted.") % {"name": cluster.name})
    return redirect("clusters:list")


@allowed_if(is_platform_admin)
@require_http_methods(["POST"])
def namespace_remove(request: HttpRequest, pk: int, mapping: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.select_related("pool"), pk=pk)
    found = get_object_or_404(NamespaceMapping, pk=mapping, cluster=cluster)
    try:
        services.unmap_namespace(cluster, actor=request.user, namespace=found.namespace)
    except ValidationError as exc:
        messages.error(request, exc.messages[0])
    else:
        messages.success(request, _("Namespace %(ns)s unmapped.") % {"ns": found.namespace})
    return redirect(cluster)
