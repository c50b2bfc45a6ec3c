from django.urls import path

from quotas.tenancy.views import tenants, users

app_name = "quotas"

# Tenants, members and quotas: quotas/tenancy/views/tenants.py.
urlpatterns = [
    path("tenants/", tenants.tenant_list, name="tenant_list"),
    path("tenants/add/", tenants.tenant_add, name="tenant_add"),
    path("tenants/<slug:slug>/", tenants.tenant_detail, name="tenant_detail"),
    path("tenants/<slug:slug>/edit/", tenants.tenant_edit, name="tenant_edit"),
    path("tenants/<slug:slug>/members/", tenants.tenant_members, name="tenant_members"),
    path(
        "tenants/<slug:slug>/members/<int:pk>/role/",
        tenants.member_role,
        name="member_role",
    ),
    path(
        "tenants/<slug:slug>/members/<int:pk>/remove/",
        tenants.member_remove,
        name="member_remove",
    ),
    path("tenants/<slug:slug>/quotas/add/", tenants.quota_add, name="quota_add"),
    path("tenants/<slug:slug>/quotas/<int:pk>/edit/", tenants.quota_edit, name="quota_edit"),
    path(
        "tenants/<slug:slug>/quotas/<int:pk>/delete/",
        tenants.quota_delete,
        name="quota_delete",
    ),
    # Users (platform admins) and the set-password page: quotas/tenancy/views/users.py.
    path("users/", users.user_list, name="user_list"),
    path("users/add/", users.user_add, name="user_add"),
    path("users/<int:pk>/", users.user_detail, name="user_detail"),
    path("users/<int:pk>/deactivate/", users.user_deactivate, name="user_deactivate"),
    path("users/<int:pk>/reactivate/", users.user_reactivate, name="user_reactivate"),
    path(
        "users/<int:pk>/password-link/",
        users.user_password_link,
        name="user_password_link",
    ),
    path(
        "accounts/set-password/done/",
        users.PasswordSetDoneView.as_view(),
        name="password_set_done",
    ),
    path(
        "accounts/set-password/<uidb64>/<token>/",
        users.PasswordSetView.as_view(),
        name="password_set",
    ),
]
