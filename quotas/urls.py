from django.urls import path

from quotas import tenant_views

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
]
