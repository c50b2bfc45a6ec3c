from django.urls import path
from rest_framework.routers import SimpleRouter

from quotas.tenancy.api.preference_views import PreferenceView
from quotas.tenancy.api.user_views import UserViewSet
from quotas.tenancy.api.views import MembershipViewSet, QuotaViewSet, TenantViewSet

router = SimpleRouter()
router.register("tenants", TenantViewSet, basename="tenant")
router.register("memberships", MembershipViewSet, basename="membership")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("users", UserViewSet, basename="user")

urlpatterns = [
    path("me/preferences/", PreferenceView.as_view(), name="me-preferences"),
    *router.urls,
]
