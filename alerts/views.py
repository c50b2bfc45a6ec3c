"""Channel pages: list, add, edit, delete, send a test, and each channel's deliveries.

Everyone manages their own channels (alerts.permissions); another's channel is 404.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from alerts import services
from alerts.forms import ChannelForm
from alerts.models import Channel, DeliveryAttempt
from alerts.permissions import managed_tenants, visible_channels
from alerts.transports import TRANSPORTS
from audit.interface import request_address
from portal.forms import add_service_errors

DELIVERIES_SHOWN = 50


def _channel(request: HttpRequest, pk: int) -> Channel:
    return get_object_or_404(visible_channels(request.user), pk=pk)


@login_required
def channel_list(request: HttpRequest) -> HttpResponse:
    channels = visible_channels(request.user).select_related("owner", "tenant")
    return render(request, "alerts/channels/list.html", {"channels": channels})


@login_required
def channel_add(request: HttpRequest) -> HttpResponse:
    form = ChannelForm(request.POST or None, tenants=managed_tenants(request.user))
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        tenant = data.get("tenant")
        try:
            channel_id = services.create_channel(
                actor=request.user, address=request_address(request), name=data["name"],
                kind=data["kind"], settings_values=form.settings_values(),
                owner_id=None if tenant else request.user.pk,
                tenant_id=tenant.pk if tenant else None,
                enabled=data["enabled"], language=data["language"],
            )  # fmt: skip
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, _("Channel %(name)s added.") % {"name": data["name"]})
            return redirect("alerts:channel_detail", channel_id)
    return render(request, "alerts/channels/form.html",
                  {"form": form, "channel": None})  # fmt: skip


@login_required
def channel_edit(request: HttpRequest, pk: int) -> HttpResponse:
    channel = _channel(request, pk)
    form = ChannelForm(request.POST or None, channel=channel)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        changes = {
            "name": data["name"], "kind": data["kind"], "language": data["language"],
            "enabled": data["enabled"], "settings": form.settings_values(),
        }  # fmt: skip
        try:
            services.update_channel(
                channel.pk, actor=request.user, address=request_address(request), changes=changes
            )
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, _("Channel %(name)s saved.") % {"name": data["name"]})
            return redirect("alerts:channel_detail", channel.pk)
    return render(request, "alerts/channels/form.html",
                  {"form": form, "channel": channel})  # fmt: skip


@login_required
def channel_detail(request: HttpRequest, pk: int) -> HttpResponse:
    channel = _channel(request, pk)
    deliveries = channel.deliveries.select_related("event").prefetch_related(
        Prefetch("attempt_log", queryset=DeliveryAttempt.objects.order_by("number"))
    )[:DELIVERIES_SHOWN]
    labels = {f.name: f.label for f in TRANSPORTS[channel.kind].fields}
    shown = [(labels.get(key, key), value) for key, value in channel.settings.items()]
    context = {"channel": channel, "deliveries": deliveries, "shown_settings": shown}
    return render(request, "alerts/channels/detail.html", context)


@login_required
@require_POST
def channel_test(request: HttpRequest, pk: int) -> HttpResponse:
    channel = _channel(request, pk)
    services.send_test(channel.pk, actor=request.user, address=request_address(request))
    messages.success(request, _("Test message queued; its attempts appear below."))
    return redirect("alerts:channel_detail", channel.pk)


@login_required
@require_POST
def channel_delete(request: HttpRequest, pk: int) -> HttpResponse:
    channel = _channel(request, pk)
    services.delete_channel(channel.pk, actor=request.user, address=request_address(request))
    messages.success(request, _("Channel %(name)s deleted.") % {"name": channel.name})
    return redirect("alerts:channel_list")
