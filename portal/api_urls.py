"""The REST API's routes (``/api/v1/``): each app contributes its own."""

from django.urls import path, reverse
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from agents.api.urls import urlpatterns as agents_urls
from alerts.api.urls import urlpatterns as alerts_urls
from audit.api.urls import urlpatterns as audit_urls
from clusters.api.urls import urlpatterns as clusters_urls
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
    *clusters_urls,
]  # fmt: skip


@extend_schema(exclude=True)  # a signpost, not a resource: docs/api.md names it
@api_view(["GET"])
def api_root(request: Request) -> Response:
    """Where the API is described; a caller who is not signed in gets 401, as on every
    other endpoint, rather than a 404 that reads as a wrong URL."""
    return Response(
        {
            "schema": request.build_absolute_uri(reverse("api-schema")),
            "docs": request.build_absolute_uri(reverse("api-docs")),
            "redoc": request.build_absolute_uri(reverse("api-redoc")),
        }
    )


urlpatterns.insert(0, path("", api_root, name="root"))
