from rest_framework.routers import DefaultRouter

from agents.api.views import GPUViewSet, NodeViewSet

router = DefaultRouter()
router.register("nodes", NodeViewSet)
router.register("gpus", GPUViewSet)

urlpatterns = router.urls
