from django.urls import path

from clusters import views

app_name = "clusters"

urlpatterns = [
    path("clusters/", views.cluster_list, name="list"),
    path("clusters/add/", views.cluster_add, name="add"),
    path("clusters/<int:pk>/", views.cluster_detail, name="detail"),
    path("clusters/<int:pk>/edit/", views.cluster_edit, name="edit"),
    path("clusters/<int:pk>/delete/", views.cluster_delete, name="delete"),
    path(
        "clusters/<int:pk>/namespaces/<int:mapping>/remove/",
        views.namespace_remove,
        name="namespace_remove",
    ),
]
