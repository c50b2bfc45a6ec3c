from django.urls import path

from quotas.requests import views

app_name = "requests"

urlpatterns = [
    path("home/", views.home, name="home"),
    path("requests/", views.request_mine, name="request_mine"),
    path("requests/new/", views.request_new, name="request_new"),
    path("requests/notices/read/", views.notices_read, name="notices_read"),
    path("requests/<int:pk>/", views.request_detail, name="request_detail"),
    path("requests/<int:pk>/release/", views.request_release, name="request_release"),
    path("requests/<int:pk>/extend/", views.request_extend, name="request_extend"),
    path("requests/<int:pk>/resize/", views.request_resize, name="request_resize"),
    path("requests/<int:pk>/decide/", views.request_decide, name="request_decide"),
    path("requests/<int:pk>/extension/", views.extension_decide, name="extension_decide"),
    path("approvals/", views.approvals, name="approvals"),
]
