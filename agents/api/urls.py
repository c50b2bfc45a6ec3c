from rest_framework.routers import SimpleRouter

from agents.api.views import NodeViewSet

router = SimpleRouter()
router.register("nodes", NodeViewSet)

urlpatterns = router.urls
