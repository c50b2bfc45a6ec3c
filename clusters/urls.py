from django.urls import path

from clusters import views

app_name = "clusters"

urlpatterns = [
    path("clusters/", views.cluster_list, name="list"),
    path("clusters/add/", views.cluster_add, name="add"),
    path("clusters/<int:pk>/", views.cluster_detail, name="detail"),
]
