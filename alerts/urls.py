from django.urls import path

from alerts import views

app_name = "alerts"

urlpatterns = [
    path("alerts/channels/", views.channel_list, name="channel_list"),
    path("alerts/channels/add/", views.channel_add, name="channel_add"),
    path("alerts/channels/<int:pk>/", views.channel_detail, name="channel_detail"),
    path("alerts/channels/<int:pk>/edit/", views.channel_edit, name="channel_edit"),
    path("alerts/channels/<int:pk>/test/", views.channel_test, name="channel_test"),
    path("alerts/channels/<int:pk>/delete/", views.channel_delete, name="channel_delete"),
]
