from django.urls import path

from alerts.consumers import AlertEventConsumer

websocket_urlpatterns = [path("ws/alerts/", AlertEventConsumer.as_asgi())]
