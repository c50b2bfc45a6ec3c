from rest_framework.routers import SimpleRouter

from quotas.requests.api.views import GpuRequestViewSet

router = SimpleRouter()
router.register("gpu-requests", GpuRequestViewSet, basename="gpurequest")

urlpatterns = router.urls
