"""Pages to register nodes: list, add, edit, import, test a connection.

Each takes the node permission it needs (agents.permissions), the same the API and the admin
check. Anonymous visitors are sent to the login page; signed-in users without the permission
get 403, which tells them the page exists but is not theirs, instead of a confusing login loop.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from agents import connection_test, node_audit, node_files, permissions, registration
from agents.choices import NodeSource
from agents.forms import NodeForm, NodeImportForm
from agents.models import Node
from portal.forms import add_service_errors
from portal.security import allowed_if


# Read-only for those granted only view_node: the actions check their own permissions.
@allowed_if(permissions.can_see_agent_details)
def node_list(request: HttpRequest) -> HttpResponse:
    nodes = Node.objects.order_by("name").only(
        "name", "source", "agent_url", "agent_token_hint", "labels", "state", "last_seen"
    )
    return render(request, "agents/nodes/list.html", {"nodes": nodes})


def _values(form: NodeForm) -> dict[str, str]:
    data = form.cleaned_data
    return {k: data[k] for k in ("name", "agent_url", "token", "labels", "state")}


@allowed_if(permissions.can_add_nodes)
def node_add(request: HttpRequest) -> HttpResponse:
    form = NodeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            node = registration.register_node(**_values(form), **node_audit.who(request))
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, _("Node %(name)s added.") % {"name": node.name})
            return redirect("agents:node_list")
    return render(request, "agents/nodes/form.html", {"form": form, "node": None})


@allowed_if(permissions.can_change_nodes)
def node_edit(request: HttpRequest, pk: int) -> HttpResponse:
    node = get_object_or_404(Node, pk=pk, source=NodeSource.AGENT)
    form = NodeForm(request.POST or None, node=node)
    if request.method == "POST" and form.is_valid():
        try:
            registration.update_node(node.pk, **_values(form), **node_audit.who(request))
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(
                request, _("Node %(name)s saved.") % {"name": form.cleaned_data["name"]}
            )
            return redirect("agents:node_list")
    return render(request, "agents/nodes/form.html", {"form": form, "node": node})


@allowed_if(permissions.can_add_nodes)
def node_import(request: HttpRequest) -> HttpResponse:
    may_update = permissions.can_change_nodes(request.user)
    form = NodeImportForm(request.POST or None, request.FILES or None, may_update=may_update)
    report, summary = None, ""
    if request.method == "POST" and form.is_valid():
        dry_run = request.POST.get("action") == "check"
        text, fmt, update = (form.cleaned_data[k] for k in ("text", "format", "update"))
        try:
            rows = node_files.parse(text, fmt, update=update)
        except node_files.ParseError as exc:
            form.add_error(None, str(exc))
        else:
            report = registration.import_nodes(
                rows, dry_run=dry_run, update=update, **node_audit.who(request)
            )
            if report.ok:
                summary = _import_summary(report, update=update)
            if report.ok and not dry_run:
                messages.success(request, summary)
                return redirect("agents:node_list")
    context = {"form": form, "report": report, "summary": summary}
    return render(request, "agents/nodes/import.html", context)


def _import_summary(report: registration.ImportReport, *, update: bool) -> str:
    created, updated = len(report.created), len(report.updated)
    if report.dry_run:
        texts = [
            ngettext(
                "%(count)s node would be created.", "%(count)s nodes would be created.", created
            )
            % {"count": created}
        ]
        if update:
            texts.append(
                ngettext(
                    "%(count)s node would be updated.", "%(count)s nodes would be updated.", updated
                )
                % {"count": updated}
            )
    elif update:
        texts = [
            ngettext("%(count)s node created.", "%(count)s nodes created.", created)
            % {"count": created},
            ngettext("%(count)s node updated.", "%(count)s nodes updated.", updated)
            % {"count": updated},
        ]
    else:
        texts = [
            ngettext("%(count)s node imported.", "%(count)s nodes imported.", created)
            % {"count": created}
        ]
    if unchanged := len(report.unchanged):
        texts.append(
            ngettext("%(count)s node is unchanged.", "%(count)s nodes are unchanged.", unchanged)
            % {"count": unchanged}
        )
    return " ".join(texts)


@require_POST
@allowed_if(permissions.can_test_connections)
def node_test_connection(request: HttpRequest) -> HttpResponse:
    """Try the URL and token from the form without saving; an empty token on an edit
    page means the node's stored one, which is only sent to the node's stored URL."""
    url = request.POST.get("agent_url", "")
    token = request.POST.get("token", "")
    if not token and (node_id := request.POST.get("node", "")).isdigit():
        # The stored token is the edit page's: only for those who may change the node.
        if not permissions.can_change_nodes(request.user):
            raise PermissionDenied
        node = get_object_or_404(Node, pk=int(node_id))
        result = connection_test.test_stored_connection(node, url)
    else:
        result = connection_test.test_connection(url, token)
    return render(request, "agents/nodes/_connection_result.html", {"result": result})
