from django.urls import path

from reports import policy_views, views

app_name = "reports"
urlpatterns = [
    path("idle/", views.idle_report, name="idle_report"),
    path("idle/warnings/<int:pk>/appeal/", views.warning_appeal, name="warning_appeal"),
    path("idle/warnings/<int:pk>/decide/", views.warning_decide, name="warning_decide"),
    path("idle/leases/<int:pk>/exempt/", views.lease_exempt, name="lease_exempt"),
    path("accounting/", views.accounting_report, name="accounting"),
    # Platform admins: reports/policy_views.py.
    path("idle/policies/", policy_views.policy_list, name="policy_list"),
    path("idle/policies/add/", policy_views.policy_add, name="policy_add"),
    path("idle/policies/<int:pk>/edit/", policy_views.policy_edit, name="policy_edit"),
    path("idle/policies/<int:pk>/delete/", policy_views.policy_delete, name="policy_delete"),
    path("accounting/prices/", policy_views.price_list, name="price_list"),
    path("accounting/prices/add/", policy_views.price_add, name="price_add"),
    path("accounting/prices/<int:pk>/edit/", policy_views.price_edit, name="price_edit"),
    path("accounting/prices/<int:pk>/delete/", policy_views.price_delete, name="price_delete"),
]
