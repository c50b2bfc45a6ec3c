from rest_framework.routers import SimpleRouter

from clusters.api.jobs import ClusterJobViewSet
from clusters.api.views import ClusterViewSet

router = SimpleRouter()
router.register(r"clusters/(?P<cluster_ref>[^/.]+)/jobs", ClusterJobViewSet, basename="cluster-job")
router.register("clusters", ClusterViewSet, basename="cluster")

urlpatterns = router.urls
