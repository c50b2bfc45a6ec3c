from django.urls import path

from quotas import account_views, tenant_views

app_name = "quotas"

# Tenants, members and quotas: quotas/tenant_views.py.
urlpatterns = [
    path("tenants/", tenant_views.tenant_list, name="tenant_list"),
    path("tenants/add/", tenant_views.tenant_add, name="tenant_add"),
    path("tenants/<slug:slug>/", tenant_views.tenant_detail, name="tenant_detail"),
    path("tenants/<slug:slug>/edit/", tenant_views.tenant_edit, name="tenant_edit"),
    path("tenants/<slug:slug>/members/", tenant_views.tenant_members, name="tenant_members"),
    path(
        "tenants/<slug:slug>/members/<int:pk>/role/",
        tenant_views.member_role,
        name="member_role",
    ),
    path(
        "tenants/<slug:slug>/members/<int:pk>/remove/",
        tenant_views.member_remove,
        name="member_remove",
    ),
    path("tenants/<slug:slug>/quotas/add/", tenant_views.quota_add, name="quota_add"),
    path("tenants/<slug:slug>/quotas/<int:pk>/edit/", tenant_views.quota_edit, name="quota_edit"),
    path(
        "tenants/<slug:slug>/quotas/<int:pk>/delete/",
        tenant_views.quota_delete,
        name="quota_delete",
    ),
    # Users (platform admins) and the set-password page: quotas/account_views.py.
    path("users/", account_views.user_list, name="user_list"),
    path("users/add/", account_views.user_add, name="user_add"),
    path("users/<int:pk>/", account_views.user_detail, name="user_detail"),
    path("users/<int:pk>/deactivate/", account_views.user_deactivate, name="user_deactivate"),
    path("users/<int:pk>/reactivate/", account_views.user_reactivate, name="user_reactivate"),
    path(
        "users/<int:pk>/password-link/",
        account_views.user_password_link,
        name="user_password_link",
    ),
    path(
        "accounts/set-password/done/",
        account_views.PasswordSetDoneView.as_view(),
        name="password_set_done",
    ),
    path(
        "accounts/set-password/<uidb64>/<token>/",
        account_views.PasswordSetView.as_view(),
        name="password_set",
    ),
]
