"""/api/v1/users/: the people who sign in, for platform admins (``quotas.tenancy.accounts``).

Everyone else is refused (403): the list of users is not a tenant's business. A new user's
set-password link is in the answer that makes it (and in a new link's answer), once: those
POSTs refuse an Idempotency-Key, whose record would keep the link.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema, extend_schema_serializer, extend_schema_view
from rest_framework import mixins, permissions, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from audit.interface import request_address
from portal.api_views import ApiGenericViewSet
from quotas import permissions as quota_permissions
from quotas.tenancy import accounts
from quotas.tenancy.api.docs import USER_EXAMPLES
from quotas.tenancy.api.serializers import call_service
from quotas.tenancy.filtersets import UserFilterSet

OPERATIONS: dict[str, Promise] = {
    "list": _(
        "Every user who signs in to the portal, by user name (platform admins only): name, "
        "e-mail, whether active and whether they have chosen a password. Service accounts "
        "are not listed here. Filters: search (user name, name or e-mail), is_active."
    ),
    "retrieve": _("One user, as in the list."),
    "create": _(
        "Make a user (platform admins): a user name, and optionally a first and last name "
        "and an e-mail. They have no password: the answer carries password_link, once, the "
        "page where they choose one; pass it on. Add them to tenants through memberships."
    ),
    "deactivate": _(
        "Stop a user signing in: their sessions end and their API tokens are refused until "
        "they are reactivated; their memberships stay. Refused for yourself, for the last "
        "admin of a tenant, and for a superuser unless you are one."
    ),
    "reactivate": _("Let a deactivated user sign in again, with their password and tokens."),
    "password_link": _(
        "A new set-password link for a user who has not chosen a password yet (the first "
        "expired or was lost), once. Refused once they have chosen one."
    ),
}
SECRET_LINK = _(
    "This request does not take an Idempotency-Key: the answer holds a set-password link, "
    "which is shown once and never stored. Send it without the header."
)


@extend_schema_serializer(examples=USER_EXAMPLES)
class UserSerializer(serializers.ModelSerializer):
    """A user (never their password)."""

    username = serializers.CharField(
        max_length=accounts.NAME_MAX, help_text="What they sign in with: letters, digits, @.+-_."
    )
    first_name = serializers.CharField(max_length=accounts.NAME_MAX, required=False, default="")
    last_name = serializers.CharField(max_length=accounts.NAME_MAX, required=False, default="")
    email = serializers.CharField(max_length=accounts.EMAIL_MAX, required=False, default="")
    password_chosen = serializers.SerializerMethodField(
        help_text="Whether they have chosen a password (a new user has not, until they use "
        "their set-password link)."
    )

    class Meta:
        model = get_user_model()
        fields = [
            "id", "username", "first_name", "last_name", "email", "is_active",
            "password_chosen", "source", "date_joined", "last_login",
        ]  # fmt: skip
        read_only_fields = ["id", "is_active", "date_joined", "last_login"]
        # The name's uniqueness (whatever its case) is said by the service, per field.
        extra_kwargs = {"username": {"validators": []}}

    source = serializers.SerializerMethodField(
        help_text="Where the account comes from: local (the portal's own), ldap (a "
        "company directory, which owns the name, e-mail, password and whether active: "
        "deactivate, reactivate and password-link are refused with 403 for it) or oidc (an "
        "OpenID Connect provider, which owns the name, e-mail and password: password-link "
        "is refused with 403; deactivate stops its sessions and tokens here)."
    )

    def get_password_chosen(self, user) -> bool:
        return user.has_usable_password()

    def get_source(self, user) -> str:
        found = getattr(user, "account_source", None)  # annotated by the list's queryset
        return found or accounts.source_of(user)[0]


class NewUserSerializer(UserSerializer):
    password_link = serializers.CharField(
        read_only=True,
        help_text="The page where the new user chooses their password: shown in this answer "
        "only. It works once, for PASSWORD_RESET_TIMEOUT (3 days by default).",
    )

    class Meta(UserSerializer.Meta):
        fields = [*UserSerializer.Meta.fields, "password_link"]


class PasswordLinkSerializer(serializers.Serializer):
    password_link = serializers.CharField(
        read_only=True, help_text="The page where the user chooses their password, once."
    )


class PlatformAdmins(permissions.BasePermission):
    def has_permission(self, request: Request, view) -> bool:
        return quota_permissions.can_manage_users(request.user)


@extend_schema_view(
    **{name: extend_schema(description=text) for name, text in OPERATIONS.items()
       if name in ("list", "retrieve")},
)  # fmt: skip
class UserViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ApiGenericViewSet):
    serializer_class = UserSerializer
    filterset_class = UserFilterSet
    permission_classes = [permissions.IsAuthenticated, PlatformAdmins]
    idempotency_refused = frozenset({"create", "password_link"})
    idempotency_refused_message = SECRET_LINK

    def get_queryset(self):
        return accounts.with_source(accounts.managed_users()).order_by("username")

    def _answer(self, user, *, link: str | None = None, code: int = status.HTTP_200_OK):
        data = dict(UserSerializer(user).data)
        if link is not None:
            data["password_link"] = self.request.build_absolute_uri(link)
        return Response(data, status=code)

    def _address(self) -> dict[str, Any]:
        return {"address": request_address(self.request)}

    @extend_schema(
        request=UserSerializer, responses={201: NewUserSerializer},
        description=OPERATIONS["create"],
    )  # fmt: skip
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = UserSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = call_service(
            accounts.create_user, request.user, **self._address(), **serializer.validated_data
        )
        link = accounts.set_password_path(user)
        return self._answer(user, link=link, code=status.HTTP_201_CREATED)

    @extend_schema(summary=_("Deactivate a user"), request=None, responses=UserSerializer,
                   description=OPERATIONS["deactivate"])  # fmt: skip
    @action(detail=True, methods=["post"])
    def deactivate(self, request: Request, pk: str | None = None) -> Response:
        user = self.get_object()
        return self._answer(
            call_service(accounts.deactivate_user, user.pk, request.user, **self._address())
        )

    @extend_schema(summary=_("Reactivate a user"), request=None, responses=UserSerializer,
                   description=OPERATIONS["reactivate"])  # fmt: skip
    @action(detail=True, methods=["post"])
    def reactivate(self, request: Request, pk: str | None = None) -> Response:
        user = self.get_object()
        return self._answer(
            call_service(accounts.reactivate_user, user.pk, request.user, **self._address())
        )

    @extend_schema(
        summary=_("Make a password link"),
        request=None, responses=PasswordLinkSerializer, description=OPERATIONS["password_link"],
    )  # fmt: skip
    @action(detail=True, methods=["post"], url_path="password-link")
    def password_link(self, request: Request, pk: str | None = None) -> Response:
        user = self.get_object()
        path = call_service(accounts.new_password_link, user.pk, request.user, **self._address())
        return Response({"password_link": request.build_absolute_uri(path)})
