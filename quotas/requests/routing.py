from django.urls import path

from quotas.requests.consumers import HomeConsumer, RequestConsumer

websocket_urlpatterns = [
    path("ws/requests/", RequestConsumer.as_asgi()),
    path("ws/home/", HomeConsumer.as_asgi()),
]
