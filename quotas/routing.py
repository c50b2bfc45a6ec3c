from django.urls import path

from quotas.consumers import RequestConsumer

websocket_urlpatterns = [path("ws/requests/", RequestConsumer.as_asgi())]
