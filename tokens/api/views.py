"""/api/v1/tokens/ (your own tokens) and /api/v1/service-accounts/ (tenants' CI accounts).

Thin views: what each caller may read is the queryset (another tenant's account is 404),
what they may change is decided by ``tokens.services``, which raise PermissionError (403)
and field-level ValidationError (400).
"""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from audit.interface import request_address
from portal.api_views import ApiGenericViewSet
from tokens import services
from tokens.api.docs import SERVICE_ACCOUNT_OPERATIONS, TOKEN_OPERATIONS
from tokens.api.serializers import (
    ApiTokenSerializer,
    NewApiTokenSerializer,
    ServiceAccountSerializer,
    call_service,
)
from tokens.filtersets import ApiTokenFilterSet, ServiceAccountFilterSet
from tokens.models import ApiToken


def _via(request: Request) -> ApiToken | None:
    """The token the request came with (None for the browser's session)."""
    return request.auth if isinstance(request.auth, ApiToken) else None


def _issue(request: Request, fn: Any, *args: Any) -> Response:
    serializer = ApiTokenSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    token, key = call_service(
        fn, request.user, *args, name=data["name"], scope=data["scope"],
        expires_at=data.get("expires_at"), via=_via(request), address=request_address(request),
    )  # fmt: skip
    token.key = key
    return Response(NewApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    **{name: extend_schema(description=text)
       for name, text in TOKEN_OPERATIONS.items() if name != "destroy"},
    # The row stays, revoked: not a delete.
    destroy=extend_schema(summary=_("Revoke an API token"),
                          description=TOKEN_OPERATIONS["destroy"]),
)  # fmt: skip
class ApiTokenViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    mixins.DestroyModelMixin, ApiGenericViewSet,
):  # fmt: skip
    serializer_class = ApiTokenSerializer
    filterset_class = ApiTokenFilterSet
    # The answer carries the new key: an idempotency record would keep it in plain text.
    idempotency_refused = frozenset({"create"})

    def get_queryset(self):
        return services.own_tokens(self.request.user).order_by("-created", "-id")

    @extend_schema(responses={201: NewApiTokenSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return _issue(request, services.create_token)

    def perform_destroy(self, instance: ApiToken) -> None:
        call_service(services.revoke_own_token, self.request.user, instance,
                     address=request_address(self.request))  # fmt: skip


@extend_schema_view(
    **{name: extend_schema(description=text)
       for name, text in SERVICE_ACCOUNT_OPERATIONS.items()
       if name not in ("tokens", "revoke_token", "destroy")},
    # The account stays, disabled: not a delete.
    destroy=extend_schema(summary=_("Disable a service account"),
                          description=SERVICE_ACCOUNT_OPERATIONS["destroy"]),
)  # fmt: skip
class ServiceAccountViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    mixins.DestroyModelMixin, ApiGenericViewSet,
):  # fmt: skip
    serializer_class = ServiceAccountSerializer
    filterset_class = ServiceAccountFilterSet
    # Making an account takes a key; issuing its token does not (ApiTokenViewSet's reason).
    idempotency_refused = frozenset({"tokens"})

    def get_queryset(self):
        return (
            services.visible_service_accounts(self.request.user)
            .select_related("created_by")
            .order_by("tenant__name", "name", "id")
        )

    def perform_create(self, serializer: ServiceAccountSerializer) -> None:
        data = serializer.validated_data
        serializer.instance = call_service(
            services.create_service_account, self.request.user, tenant=data["tenant"],
            name=data["name"], description=data.get("description", ""),
            address=request_address(self.request),
        )  # fmt: skip

    def perform_destroy(self, instance) -> None:
        call_service(services.disable_service_account, self.request.user, instance,
                     address=request_address(self.request))  # fmt: skip

    def _managed(self):
        account = self.get_object()
        if not services.can_manage(self.request.user, account.tenant_id):
            raise PermissionDenied(services.MAY_NOT)
        return account

    @extend_schema(
        description=SERVICE_ACCOUNT_OPERATIONS["tokens"], request=ApiTokenSerializer,
        responses={200: ApiTokenSerializer(many=True), 201: NewApiTokenSerializer},
        filters=False,
    )  # fmt: skip
    @extend_schema(methods=["GET"], summary=_("List a service account's tokens"))
    @extend_schema(methods=["POST"], summary=_("Issue a token to a service account"))
    @action(detail=True, methods=["get", "post"], filter_backends=[])
    def tokens(self, request: Request, pk: str | None = None) -> Response:
        account = self._managed()
        if request.method == "POST":
            return _issue(request, services.issue_service_token, account)
        tokens = ApiToken.objects.filter(user_id=account.user_id).order_by("-created", "-id")
        page = self.paginate_queryset(tokens)
        return self.get_paginated_response(ApiTokenSerializer(page, many=True).data)

    @extend_schema(summary=_("Revoke a service account's token"),
                   description=SERVICE_ACCOUNT_OPERATIONS["revoke_token"], request=None,
                   responses={204: None})  # fmt: skip
    @action(detail=True, methods=["delete"], url_path=r"tokens/(?P<token_id>[0-9]+)",
            filter_backends=[])  # fmt: skip
    def revoke_token(self, request: Request, pk: str | None = None,
                     token_id: str | None = None) -> Response:  # fmt: skip
        account = self._managed()
        token = get_object_or_404(ApiToken, pk=token_id, user_id=account.user_id)
        call_service(services.revoke_service_token, request.user, account, token,
                     address=request_address(request))  # fmt: skip
        return Response(status=status.HTTP_204_NO_CONTENT)
