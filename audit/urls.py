from django.urls import path

from audit import views

app_name = "audit"

urlpatterns = [
    path("audit/", views.entry_list, name="entry_list"),
    path("audit/export.csv", views.entry_export, name="entry_export"),
]
