from rest_framework.routers import SimpleRouter

from quotas.api.requests import GpuRequestViewSet

router = SimpleRouter()
router.register("gpu-requests", GpuRequestViewSet, basename="gpurequest")

urlpatterns = router.urls
