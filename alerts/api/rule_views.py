"""Rules, subscriptions, events and the Alertmanager receiver in the API: thin views over
alerts.config, alerts.events and alerts.sources.alertmanager, with the pages' permissions."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import permissions, status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alerts import config, events
from alerts.api.docs import ALERTMANAGER_EXAMPLES
from alerts.api.rule_serializers import EventSerializer, RuleSerializer, SubscriptionSerializer
from alerts.filtersets import EventFilterSet, RuleFilterSet
from alerts.models import Rule
from alerts.permissions import (
    can_acknowledge,
    manages_rules,
    visible_events,
    visible_rules,
    visible_subscriptions,
)
from alerts.sources import alertmanager
from audit.interface import request_address
from portal.api_errors import Conflict, error_response
from portal.api_schema import ERROR
from portal.api_views import ApiModelViewSet, ApiReadOnlyModelViewSet


class RulesEditedByPlatformAdmins(permissions.BasePermission):
    """Writes by the platform admin. A change of one rule is judged once it is found, as
    on the pages: another tenant's rule is 404 (it is not there for the caller), one that
    applies to the caller 403."""

    def has_permission(self, request, view) -> bool:
        if request.method in permissions.SAFE_METHODS or manages_rules(request.user):
            return True
        return (view.lookup_url_kwarg or view.lookup_field) in view.kwargs

    def has_object_permission(self, request, view, obj) -> bool:
        return request.method in permissions.SAFE_METHODS or manages_rules(request.user)


class RuleViewSet(ApiModelViewSet):
    """Alert rules: everyone signed in reads them (to subscribe); the platform admin
    edits them. Built-in rules can be disabled, not deleted."""

    serializer_class = RuleSerializer
    filterset_class = RuleFilterSet
    permission_classes = [permissions.IsAuthenticated, RulesEditedByPlatformAdmins]

    def get_queryset(self):
        return visible_rules(self.request.user).order_by("name", "pk")

    def perform_destroy(self, instance: Rule) -> None:
        config.delete_rule(instance.pk, actor=self.request.user,
                           address=request_address(self.request))  # fmt: skip


class SubscriptionViewSet(ApiModelViewSet):
    """Your subscriptions and your tenants' (as their admin); all for the platform admin.
    Another's subscription is 404."""

    serializer_class = SubscriptionSerializer

    def get_queryset(self):
        return visible_subscriptions(self.request.user).prefetch_related("rules").order_by("pk")

    def perform_destroy(self, instance) -> None:
        config.delete_subscription(instance.pk, actor=self.request.user,
                                   address=request_address(self.request))  # fmt: skip


class EventViewSet(ApiReadOnlyModelViewSet):
    """Alert events as they are sent: your tenants' and, for platform admins and
    node operators, the platform's. Filter by state, severity, rule, tenant, scope, time."""

    serializer_class = EventSerializer
    filterset_class = EventFilterSet

    def get_queryset(self):
        return (
            visible_events(self.request.user)
            .select_related("tenant")
            .order_by("-started_at", "-pk")
        )

    def _act(self, request: Request, step) -> Response:
        event = self.get_object()
        if not can_acknowledge(request.user, event):
            raise PermissionDenied(_("Only who answers for this event may change it."))
        if not step(event.pk, actor=request.user, address=request_address(request)):
            raise Conflict(_("The event is not in a state that allows this."))
        event.refresh_from_db()
        return Response(EventSerializer(event).data)

    @extend_schema(summary=_("Acknowledge an alert event"), request=None,
                   responses={200: EventSerializer, 409: ERROR})  # fmt: skip
    @action(detail=True, methods=["post"])
    def acknowledge(self, request: Request, pk: str | None = None) -> Response:
        """Firing → acknowledged: no more re-notifications until it resolves."""
        return self._act(request, events.acknowledge)

    @extend_schema(summary=_("Resolve an alert event by hand"), request=None,
                   responses={200: EventSerializer, 409: ERROR})  # fmt: skip
    @action(detail=True, methods=["post"])
    def resolve(self, request: Request, pk: str | None = None) -> Response:
        """Close an open event by hand (it reopens if its rule still holds)."""
        return self._act(request, events.resolve_by_hand)


# No Idempotency-Key here: keys belong to a user and Alertmanager calls as nobody; a
# notification it repeats changes nothing twice (events are de-duplicated by fingerprint).
class AlertmanagerWebhookView(APIView):
    """Prometheus Alertmanager's webhook (its webhook_configs), authenticated with the
    bearer token in ALERTMANAGER_TOKEN. 401 without it; 400 with the fields at fault
    for a malformed message, which changes nothing."""

    authentication_classes: list = []
    permission_classes: list = []

    def _authorized(self, request: Request) -> bool:
        token = settings.ALERTMANAGER_TOKEN
        given = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _sep, credentials = given.partition(" ")
        return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.strip().encode(), token.encode()
        )  # fmt: skip

    @extend_schema(summary=_("Receive Alertmanager's notifications"), request=dict,
                   responses={200: dict, 400: dict, 401: dict},
                   examples=ALERTMANAGER_EXAMPLES)  # fmt: skip
    def post(self, request: Request) -> Response:
        if not self._authorized(request):
            challenge = {"WWW-Authenticate": 'Bearer realm="alertmanager"'}
            # Built here: a view without authentication classes cannot raise a 401 in DRF.
            return error_response(
                "authentication_failed", _("Missing or wrong bearer token."),
                status.HTTP_401_UNAUTHORIZED, headers=challenge,
            )  # fmt: skip
        counts = alertmanager.receive(request.data)
        return Response(counts)
