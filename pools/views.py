"""Pool pages: list, capacity view, add, edit, delete, cards; an allocation's detail.

Reading pools takes a signed-in member; changing them the pool permissions
(pools.permissions), the same the API and the admin check. Anonymous visitors go to the
login page; signed-in users without the permission get 403. An allocation is shown to
those who may see its lease (``visible_allocations``), a 404 to anyone else, so its
existence is not told either.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.postgres.aggregates import ArrayAgg
from django.core.exceptions import ValidationError
from django.db.models import Count, Exists, OuterRef, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from agents.choices import GpuHealth, NodeSource, NodeState, vendor_label
from agents.models import GPU, Node
from pools import capacity, configuration, failover, launch, permissions, services
from pools.agent_reports import agent_report
from pools.choices import AgentSync, AllocationState
from pools.forms import PoolCardsForm, PoolForm
from pools.models import Pool, PoolCard
from portal.forms import add_service_errors
from portal.security import allowed_if, client_ip

MAX_CARD_CHOICES = 2000


def _who(request: HttpRequest) -> dict:
    return {"actor": request.user, "address": client_ip(request)}


def _labels() -> dict:
    """Translated words the page script needs, handed over as JSON."""
    return {
        "states": {v: str(label) for v, label in NodeState.choices},
        "health": {v: str(label) for v, label in GpuHealth.choices},
        "allocation_states": {v: str(label) for v, label in AllocationState.choices},
        "agent_sync": {v: str(label) for v, label in AgentSync.choices},
        "ui": {
            "live": _("Live"),
            "reconnecting": _("Reconnecting…"),
            "hidden_owner": _("another user's vGPU"),
            "whole_card": _("whole card"),
            "free": _("free"),
            "cordoned": _("cordoned"),
            "unschedulable": _("takes no new slices"),
            "no_reading": _("no reading"),
            "at_risk": _("memory at risk"),
            "remove": _("Remove"),
        },
    }


@login_required
def pool_list(request: HttpRequest) -> HttpResponse:
    pools = Pool.objects.annotate(
        card_count=Count("cards"),
        compute_capacity=Sum("cards__compute_capacity"),
        compute_allocated=Sum("cards__compute_allocated"),
        memory_capacity=Sum("cards__memory_capacity_mib"),
        memory_allocated=Sum("cards__memory_allocated_mib"),
        slice_count=Sum("cards__slices"),
        vendors=ArrayAgg("cards__gpu__vendor", distinct=True),
    ).order_by("name")
    return render(request, "pools/pool_list.html", {"pools": pools})


@allowed_if(permissions.can_add_pools)
def pool_add(request: HttpRequest) -> HttpResponse:
    form = PoolForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            pool = configuration.create_pool(form.values(), **_who(request))
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, _("Pool %(name)s created.") % {"name": pool.name})
            return redirect(pool)
    return _form_page(request, form, None)


@allowed_if(permissions.can_change_pools)
def pool_edit(request: HttpRequest, slug: str) -> HttpResponse:
    pool = get_object_or_404(Pool, slug=slug)
    form = PoolForm(request.POST or None, pool=pool)
    if request.method == "POST" and form.is_valid():
        try:
            pool = configuration.update_pool(pool.pk, form.values(), **_who(request))
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, _("Pool %(name)s saved.") % {"name": pool.name})
            return redirect(pool)
    return _form_page(request, form, pool)


def _form_page(request: HttpRequest, form: PoolForm, pool: Pool | None) -> HttpResponse:
    # A refused post is a 400, as the API answers it; the form shows why.
    status = 400 if request.method == "POST" else 200
    return render(request, "pools/pool_form.html", {"form": form, "pool": pool}, status=status)


@allowed_if(permissions.can_delete_pools)
def pool_delete(request: HttpRequest, slug: str) -> HttpResponse:
    pool = get_object_or_404(Pool, slug=slug)
    error = ""
    if request.method == "POST":
        try:
            configuration.delete_pool(pool.pk, **_who(request))
        except configuration.PoolInUse as exc:
            error = str(exc)
        else:
            messages.success(request, _("Pool %(name)s deleted.") % {"name": pool.name})
            return redirect("pools:pool_list")
    status = 409 if error else 200
    return render(request, "pools/pool_delete.html", {"pool": pool, "error": error},
                  status=status)  # fmt: skip


def _card_choices() -> list[tuple[int, str]]:
    gpus = GPU.objects.filter(pool_card__isnull=True).select_related("node")
    return [
        (g.pk, f"{g.node.name} #{g.index} · {g.model}")
        for g in gpus.order_by("node__name", "index")[:MAX_CARD_CHOICES]
    ]


@login_required
def pool_detail(request: HttpRequest, slug: str) -> HttpResponse:
    pool = get_object_or_404(Pool, slug=slug)
    return _detail(request, pool)


def _detail(request: HttpRequest, pool: Pool, cards_form: PoolCardsForm | None = None,
            status: int = 200) -> HttpResponse:  # fmt: skip
    can_change = permissions.can_change_pools(request.user)
    if can_change and cards_form is None:
        cards_form = PoolCardsForm(choices=_card_choices())
    picture = capacity.picture(pool, request.user)
    context = {
        "pool": pool,
        "picture": picture,
        "vendors": _vendors(pool, picture["cards"]),
        "slice_refusal": services.slice_refusal(pool),
        "usage": capacity.usage(pool.pk),
        "labels": _labels(),
        "can_change": can_change,
        "can_delete": permissions.can_delete_pools(request.user),
        "cards_form": cards_form if can_change else None,
    }
    if can_change:
        context["nodes"] = _nodes(context["picture"]["cards"])
    return render(request, "pools/pool_detail.html", context, status=status)


def _vendors(pool: Pool, cards: list[dict]) -> list[tuple[str, int]]:
    """The pool's vendors as pages name them, with how many of its cards each has; the
    vendor rule's alone (0 cards) while none has joined."""
    counts: dict[str, int] = {}
    for card in cards:
        counts[card["vendor"]] = counts.get(card["vendor"], 0) + 1
    if not counts and pool.match_vendor:
        counts[pool.match_vendor] = 0
    return [(vendor_label(v), n) for v, n in sorted(counts.items(), key=lambda i: -i[1])]


def _nodes(cards: list[dict]) -> list[dict]:
    """The pool's nodes (name, state, cards) for the drain buttons, in the cards' order."""
    nodes: dict[int, dict] = {}
    for card in cards:
        node = nodes.setdefault(card["node_id"], {
            "id": card["node_id"], "name": card["node"], "state": card["node_state"],
            "draining": card["node_state"] == NodeState.DRAINING, "cards": 0, "slices": 0,
        })  # fmt: skip
        node["cards"] += 1
        node["slices"] += card["slice_count"]
    for node in nodes.values():
        node["state_label"] = NodeState(node["state"]).label
    return list(nodes.values())


@require_POST
@allowed_if(permissions.can_change_pools)
def pool_cards_add(request: HttpRequest, slug: str) -> HttpResponse:
    pool = get_object_or_404(Pool, slug=slug)
    form = PoolCardsForm(request.POST, choices=_card_choices())
    if form.is_valid():
        try:
            joined = configuration.add_pool_cards(
                pool.pk, form.cleaned_data["gpus"], **_who(request)
            )
        except ValidationError as exc:
            add_service_errors(form, exc, rest="gpus")  # the form has no other field
        else:
            messages.success(request, _("%(count)s card(s) added.") % {"count": joined})
            return redirect(pool)
    return _detail(request, pool, form, status=400)


@require_POST
@allowed_if(permissions.can_change_pools)
def pool_card_remove(request: HttpRequest, slug: str, gpu_id: int) -> HttpResponse:
    pool = get_object_or_404(Pool, slug=slug)
    try:
        configuration.remove_pool_cards(pool.pk, [gpu_id], **_who(request))
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
    else:
        messages.success(request, _("Card removed from the pool."))
    return redirect(pool)


def _pool_node(pool: Pool, node_id: int) -> Node:
    """A node that holds a card of ``pool`` (404 otherwise: the page acts on its own)."""
    # EXISTS, not a join through the cards: a node with several cards in the pool is one row.
    in_pool = PoolCard.objects.filter(pool=pool, gpu__node=OuterRef("pk"))
    nodes = Node.objects.filter(Exists(in_pool), source=NodeSource.AGENT)
    return get_object_or_404(nodes, pk=node_id)


@require_POST
@allowed_if(permissions.can_change_pools)
def node_drain(request: HttpRequest, slug: str, node_id: int) -> HttpResponse:
    """The page's drain button: the same operation as ``POST /api/v1/pool-nodes/<id>/drain/``."""
    pool = get_object_or_404(Pool, slug=slug)
    node = _pool_node(pool, node_id)
    result = failover.drain_node(node, **_who(request))
    messages.success(
        request,
        _("Node %(node)s is draining: %(moved)s vGPU(s) moved, %(stranded)s waiting for room.")
        % {"node": node.name, "moved": len(result.moved), "stranded": len(result.stranded)},
    )
    return redirect(pool)


@require_POST
@allowed_if(permissions.can_change_pools)
def node_undrain(request: HttpRequest, slug: str, node_id: int) -> HttpResponse:
    pool = get_object_or_404(Pool, slug=slug)
    node = _pool_node(pool, node_id)
    if failover.undrain_node(node, **_who(request)):
        messages.success(request, _("Node %(node)s takes new vGPUs again.") % {"node": node.name})
    else:
        messages.error(request, _("Node %(node)s is not draining.") % {"node": node.name})
    return redirect(pool)


@require_POST
@allowed_if(permissions.can_change_pools)
def card_clear_cordon(request: HttpRequest, slug: str, gpu_id: int) -> HttpResponse:
    pool = get_object_or_404(Pool, slug=slug)
    card = get_object_or_404(PoolCard, pool=pool, gpu_id=gpu_id)
    if failover.clear_cordon(card, request.user, address=client_ip(request)):
        messages.success(request, _("The card takes new vGPUs again."))
    else:
        messages.error(request, _("This card is not cordoned."))
    return redirect(pool)


@login_required
def allocation_detail(request: HttpRequest, pk: int) -> HttpResponse:
    allocation = get_object_or_404(
        permissions.visible_allocations(request.user).select_related(
            "lease__holder", "pool", "gpu__node"
        ),
        pk=pk,
    )
    context = {
        "allocation": allocation,
        "lease": allocation.lease,
        "launch": launch.launch_settings(allocation),
        # Other people's processes on the card (violations) are named only for those who
        # may see every owner; the allocation's own processes are its reader's business.
        "agent_report": agent_report(
            allocation, owners=request.user.has_perm("telemetry.view_process_owners")
        )
        if allocation.state == AllocationState.ACTIVE
        else None,
    }
    return render(request, "pools/allocation_detail.html", context)
