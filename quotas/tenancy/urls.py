from django.urls import path

from quotas.tenancy import preference_views, user_views, views

app_name = "quotas"

# Tenants, members and quotas: quotas/tenancy/views.py.
urlpatterns = [
    path("tenants/", views.tenant_list, name="tenant_list"),
    path("tenants/add/", views.tenant_add, name="tenant_add"),
    path("tenants/<slug:slug>/", views.tenant_detail, name="tenant_detail"),
    path("tenants/<slug:slug>/edit/", views.tenant_edit, name="tenant_edit"),
    path("tenants/<slug:slug>/members/", views.tenant_members, name="tenant_members"),
    path(
        "tenants/<slug:slug>/members/<int:pk>/role/",
        views.member_role,
        name="member_role",
    ),
    path(
        "tenants/<slug:slug>/members/<int:pk>/remove/",
        views.member_remove,
        name="member_remove",
    ),
    path("tenants/<slug:slug>/quotas/add/", views.quota_add, name="quota_add"),
    path("tenants/<slug:slug>/quotas/<int:pk>/edit/", views.quota_edit, name="quota_edit"),
    path(
        "tenants/<slug:slug>/quotas/<int:pk>/delete/",
        views.quota_delete,
        name="quota_delete",
    ),
    # The language switch (Django's set_language, kept as the signed-in user's choice).
    path("i18n/setlang/", preference_views.set_language, name="set_language"),
    # Users (platform admins) and the set-password page: quotas/tenancy/user_views.py.
    path("users/", user_views.user_list, name="user_list"),
    path("users/add/", user_views.user_add, name="user_add"),
    path("users/<int:pk>/", user_views.user_detail, name="user_detail"),
    path("users/<int:pk>/deactivate/", user_views.user_deactivate, name="user_deactivate"),
    path("users/<int:pk>/reactivate/", user_views.user_reactivate, name="user_reactivate"),
    path(
        "users/<int:pk>/password-link/",
        user_views.user_password_link,
        name="user_password_link",
    ),
    path(
        "accounts/set-password/done/",
        user_views.PasswordSetDoneView.as_view(),
        name="password_set_done",
    ),
    path(
        "accounts/set-password/<uidb64>/<token>/",
        user_views.PasswordSetView.as_view(),
        name="password_set",
    ),
]
