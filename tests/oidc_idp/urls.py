from django.contrib.auth import views as auth_views
from django.http import HttpResponse
from django.urls import include, path


def healthz(request):
    return HttpResponse("ok")


urlpatterns = [
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("healthz", healthz),
]
