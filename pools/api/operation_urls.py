"""Routes of pools' operations (``/api/v1/pool-nodes/``, ``/api/v1/pool-cards/``); the
lead merges them with pools' other API routes."""

from django.urls import path

from pools.api.operations import PoolCardClearCordonView, PoolNodeDrainView

urlpatterns = [
    path("pool-nodes/<int:pk>/drain/", PoolNodeDrainView.as_view(), name="pool-node-drain"),
    path(
        "pool-cards/<int:pk>/clear-cordon/",
        PoolCardClearCordonView.as_view(),
        name="pool-card-clear-cordon",
    ),
]
