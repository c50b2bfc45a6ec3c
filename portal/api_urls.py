"""The REST API's routes (``/api/v1/``): each app contributes its own."""

from agents.api.urls import urlpatterns as agents_urls
from alerts.api.urls import urlpatterns as alerts_urls
from audit.api.urls import urlpatterns as audit_urls
from pools.api.operation_urls import urlpatterns as pool_operation_urls
from pools.api.urls import urlpatterns as pools_urls
from quotas.requests.api.urls import urlpatterns as requests_urls
from quotas.tenancy.api.urls import urlpatterns as quotas_urls
from reports.api.urls import urlpatterns as reports_urls
from telemetry.api.urls import urlpatterns as telemetry_urls
from tokens.api.urls import urlpatterns as tokens_urls

urlpatterns = [
    *agents_urls, *telemetry_urls, *pools_urls, *pool_operation_urls, *quotas_urls,
    *requests_urls, *reports_urls, *alerts_urls, *audit_urls, *tokens_urls,
]  # fmt: skip
