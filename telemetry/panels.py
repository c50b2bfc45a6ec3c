"""Panels that apps above telemetry add to the fleet dashboard (the alerts app's strip
of firing events), registered from their ``AppConfig.ready``: telemetry cannot import
them, and the dashboard must not know what they show or who may see it. The developer's
home (quotas) shows them too, through ``telemetry.interface.dashboard_panels``; and an
app may send some users from the dashboard to a page of its own (a detour)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest
from django.utils.safestring import SafeString, mark_safe

# Given the page's request, the panel's HTML (rendered by its app's templates, with its
# own permission check), or "" to show nothing.
DashboardPanel = Callable[[HttpRequest], str]

_panels: list[DashboardPanel] = []


def add_dashboard_panel(panel: DashboardPanel) -> DashboardPanel:
    if panel not in _panels:
        _panels.append(panel)
    return panel


def dashboard_panels(request: HttpRequest) -> list[SafeString]:
    # The panels' HTML comes from their apps' auto-escaping templates.
    return [mark_safe(html) for panel in _panels if (html := panel(request))]  # noqa: S308


# Given the dashboard's request, a URL to send the user to instead (an app above that
# keeps a page of its own for some users: the requests app's developer home), or None.
DashboardDetour = Callable[[HttpRequest], "str | None"]

_detours: list[DashboardDetour] = []


def add_dashboard_detour(detour: DashboardDetour) -> DashboardDetour:
    if detour not in _detours:
        _detours.append(detour)
    return detour


def dashboard_detour(request: HttpRequest) -> str | None:
    return next((url for detour in _detours if (url := detour(request))), None)
