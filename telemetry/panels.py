"""Panels that apps above telemetry add to the fleet dashboard (the alerts app's strip
of firing events, the pools' capacity bars...), registered from their ``AppConfig.ready``:
telemetry cannot import them, and the dashboard must not know what they show or who may
see it. The developer's home (quotas) shows them too, through
``telemetry.interface.dashboard_panels``; and an app may send some users from the
dashboard to a page of its own (a detour). Apps add figures to the dashboard's summary
row the same way (``add_dashboard_figures``: allocated cards, alerts firing)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.http import HttpRequest
from django.utils.safestring import SafeString, mark_safe

# Given the page's request, the panel's HTML (rendered by its app's templates, with its
# own permission check), or "" to show nothing.
DashboardPanel = Callable[[HttpRequest], str]

# Where a panel goes among the others: lower first. Telemetry's own (the summary and the
# heatmap) come before every panel; these are the apps' places, in the order an admin
# reads them: what is on fire, who waits, what is left, who uses it.
ALERTS_ORDER, APPROVALS_ORDER, POOLS_ORDER, TENANTS_ORDER = 10, 20, 30, 40

_panels: list[tuple[int, DashboardPanel]] = []


def add_dashboard_panel(panel: DashboardPanel, order: int = 100) -> DashboardPanel:
    if all(p is not panel for _order, p in _panels):
        _panels.append((order, panel))
        _panels.sort(key=lambda entry: entry[0])  # stable: equal orders keep their turn
    return panel


def dashboard_panels(request: HttpRequest) -> list[SafeString]:
    # The panels' HTML comes from their apps' auto-escaping templates.
    return [mark_safe(html) for _order, panel in _panels if (html := panel(request))]  # noqa: S308


@dataclass(frozen=True, slots=True)
class DashboardFigure:
    """One number of the dashboard's summary row ("Allocated: 12"), already translated."""

    label: str
    value: str
    detail: str = ""  # a line under the number ("3.55 of 64 GPUs' compute")
    url: str = ""  # where the number's detail lives
    tone: str = ""  # "danger" or "warning" draws the eye; "" is neutral
    order: int = 100  # telemetry's own: 10 (GPUs), 30 (busy), 40 (idle)


# Given the page's request, the figures that user may see (none: an empty iterable).
DashboardFigures = Callable[[HttpRequest], Iterable[DashboardFigure]]

_figures: list[DashboardFigures] = []


def add_dashboard_figures(figures: DashboardFigures) -> DashboardFigures:
    if figures not in _figures:
        _figures.append(figures)
    return figures


def dashboard_figures(request: HttpRequest, own: Iterable[DashboardFigure] = ()) -> list:
    """The apps' figures for this request beside telemetry's ``own``, in their order."""
    found = [*own, *(figure for source in _figures for figure in source(request))]
    return sorted(found, key=lambda figure: figure.order)


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
