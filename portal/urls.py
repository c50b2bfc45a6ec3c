from csp.constants import UNSAFE_INLINE
from csp.decorators import csp_update
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from portal import outages, views
from portal.metrics import metrics_view

# Swagger UI's start-up script comes from its own URL (the split view), not inline, so it runs
# under the site's policy. ReDoc writes its styles into <style> elements as it renders and
# searches in a worker made from a blob: that one page allows both.
api_docs_view = SpectacularSwaggerSplitView.as_view(
    url_name="api-schema", template_name="portal/swagger_ui.html"
)
redoc_view = csp_update({"style-src": [UNSAFE_INLINE], "worker-src": ["blob:"]})(
    # drf-spectacular's own ReDoc page loads Google's web fonts; ours does not.
    SpectacularRedocView.as_view(url_name="api-schema", template_name="portal/redoc.html")
)

urlpatterns = [
    path("", include("telemetry.urls")),
    path("", include("agents.urls")),
    path("", include("pools.urls")),
    path("", include("alerts.urls")),
    path("", include("quotas.requests.urls")),
    path("", include("quotas.tenancy.urls")),  # with the language switch (i18n/setlang/)
    path("", include("audit.urls")),
    path("", include("reports.urls")),
    path("", include("tokens.urls")),  # the Account page, service accounts
    path("", include("directory.urls")),  # the company directory page
    path("", include("clusters.urls")),  # Kubernetes clusters
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", outages.readyz, name="readyz"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("metrics", metrics_view, name="metrics"),
    path("api/v1/", include(("portal.api_urls", "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", api_docs_view, name="api-docs"),
    path("api/redoc/", redoc_view, name="api-redoc"),
    path("api/redoc/redoc.standalone.js", views.redoc_bundle, name="api-redoc-bundle"),
    path("admin/", admin.site.urls),
]

# Paths under /api/ answer in the API's error shape even when no view was reached.
handler400 = "portal.api_errors.bad_request"
handler403 = "portal.api_errors.permission_denied"
handler404 = "portal.api_errors.not_found"
handler500 = "portal.api_errors.server_error"
