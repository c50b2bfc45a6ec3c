from django.urls import path

from pools.consumers import PoolConsumer

websocket_urlpatterns = [path("ws/pools/<int:pool_id>/", PoolConsumer.as_asgi())]
