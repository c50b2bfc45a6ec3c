from rest_framework.routers import SimpleRouter

from alerts.api.views import ChannelViewSet

router = SimpleRouter()
router.register("alert-channels", ChannelViewSet, basename="alert-channel")

urlpatterns = router.urls
