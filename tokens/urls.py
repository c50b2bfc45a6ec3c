from django.urls import path

from tokens import views

app_name = "tokens"

urlpatterns = [
    path("account/", views.account, name="account"),
    path("account/preferences/", views.account_preferences, name="account_preferences"),
    path("account/tokens/<int:pk>/revoke/", views.token_revoke, name="token_revoke"),
    path(
        "tenants/<slug:slug>/service-accounts/",
        views.service_account_list,
        name="service_account_list",
    ),
    path(
        "tenants/<slug:slug>/service-accounts/<int:pk>/",
        views.service_account_detail,
        name="service_account_detail",
    ),
    path(
        "tenants/<slug:slug>/service-accounts/<int:pk>/disable/",
        views.service_account_disable,
        name="service_account_disable",
    ),
    path(
        "tenants/<slug:slug>/service-accounts/<int:pk>/tokens/<int:token_pk>/revoke/",
        views.service_token_revoke,
        name="service_token_revoke",
    ),
]
