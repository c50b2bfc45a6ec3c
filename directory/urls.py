from django.urls import path

from directory import views

app_name = "directory"

urlpatterns = [
    path("directory/", views.overview, name="overview"),
    # Sign-in through an OpenID Connect provider: 404 unless OIDC_ISSUER is set.
    path("oidc/authenticate/", views.oidc_authenticate, name="oidc_authenticate"),
    path("oidc/callback/", views.oidc_callback, name="oidc_callback"),
]
