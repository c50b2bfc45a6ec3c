from rest_framework.routers import SimpleRouter

from tokens.api.views import ApiTokenViewSet, ServiceAccountViewSet

router = SimpleRouter()
router.register("tokens", ApiTokenViewSet, basename="api-token")
router.register("service-accounts", ServiceAccountViewSet, basename="service-account")

urlpatterns = router.urls
