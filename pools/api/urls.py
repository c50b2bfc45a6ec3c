from rest_framework.routers import SimpleRouter

from pools.api.views import AllocationViewSet, PoolCardViewSet, PoolViewSet

router = SimpleRouter()
router.register("pools", PoolViewSet)
router.register("pool-cards", PoolCardViewSet)
router.register("allocations", AllocationViewSet, basename="allocation")

urlpatterns = router.urls
