from django.urls import path
from rest_framework.routers import SimpleRouter

from telemetry.api.views import GPUViewSet, NodeHistoryView

router = SimpleRouter()
router.register("gpus", GPUViewSet)

urlpatterns = [
    path("nodes/<int:pk>/history/", NodeHistoryView.as_view(), name="node-history"),
    *router.urls,
]
