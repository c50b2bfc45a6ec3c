from rest_framework.routers import SimpleRouter

from clusters.api.views import ClusterViewSet

router = SimpleRouter()
router.register("clusters", ClusterViewSet, basename="cluster")

urlpatterns = router.urls
