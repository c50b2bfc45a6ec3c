from django.urls import path

from telemetry.consumers import FleetConsumer, NodeConsumer

websocket_urlpatterns = [
    path("ws/fleet/", FleetConsumer.as_asgi()),
    path("ws/nodes/<int:node_id>/", NodeConsumer.as_asgi()),
]
