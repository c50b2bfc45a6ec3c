from django.urls import path

from telemetry import views

app_name = "telemetry"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("nodes/<int:pk>/", views.node_detail, name="node"),
    path("gpus/<int:pk>/", views.gpu_detail, name="gpu"),
]
