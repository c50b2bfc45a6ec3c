from rest_framework.routers import SimpleRouter

from quotas.tenancy.api.tenants import MembershipViewSet, QuotaViewSet, TenantViewSet
from quotas.tenancy.api.users import UserViewSet

router = SimpleRouter()
router.register("tenants", TenantViewSet, basename="tenant")
router.register("memberships", MembershipViewSet, basename="membership")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("users", UserViewSet, basename="user")

urlpatterns = router.urls
