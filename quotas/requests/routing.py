from django.urls import path

from quotas.requests.consumers import RequestConsumer

websocket_urlpatterns = [path("ws/requests/", RequestConsumer.as_asgi())]
