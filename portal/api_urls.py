"""The REST API's routes (``/api/v1/``): each app contributes its own."""

from agents.api.urls import urlpatterns as agents_urls
from audit.api.urls import urlpatterns as audit_urls
from telemetry.api.urls import urlpatterns as telemetry_urls

urlpatterns = [*agents_urls, *telemetry_urls, *audit_urls]
