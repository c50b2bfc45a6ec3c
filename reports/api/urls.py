from django.urls import path
from rest_framework.routers import SimpleRouter

from reports.api.views import (
    AccountingView,
    AllocationIdleViewSet,
    ExemptionViewSet,
    IdleCardViewSet,
    ReclaimWarningViewSet,
)

router = SimpleRouter()
router.register("idle-report", AllocationIdleViewSet, basename="idle-report")
router.register("idle-cards", IdleCardViewSet, basename="idle-card")
router.register("reclaim-warnings", ReclaimWarningViewSet, basename="reclaim-warning")
router.register("reclaim-exemptions", ExemptionViewSet, basename="reclaim-exemption")

urlpatterns = [*router.urls, path("accounting/", AccountingView.as_view(), name="accounting")]
