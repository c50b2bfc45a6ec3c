from django.urls import path

from reports import views

app_name = "reports"
urlpatterns = [
    path("idle/", views.idle_report, name="idle_report"),
    path("idle/warnings/<int:pk>/appeal/", views.warning_appeal, name="warning_appeal"),
    path("idle/warnings/<int:pk>/decide/", views.warning_decide, name="warning_decide"),
    path("idle/leases/<int:pk>/exempt/", views.lease_exempt, name="lease_exempt"),
    path("accounting/", views.accounting_report, name="accounting"),
]
