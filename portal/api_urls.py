"""The REST API's routes (``/api/v1/``): each app contributes its own."""

from agents.api.urls import urlpatterns as agents_urls
from pools.api.operation_urls import urlpatterns as pool_operation_urls
from pools.api.urls import urlpatterns as pools_urls
from telemetry.api.urls import urlpatterns as telemetry_urls

urlpatterns = [*agents_urls, *telemetry_urls, *pool_operation_urls, *pools_urls]
