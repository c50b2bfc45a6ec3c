from django.urls import path

from agents import node_views

app_name = "agents"

# Node registration (staff only): agents/node_views.py.
urlpatterns = [
    path("nodes/", node_views.node_list, name="node_list"),
    path("nodes/add/", node_views.node_add, name="node_add"),
    path("nodes/<int:pk>/edit/", node_views.node_edit, name="node_edit"),
    path("nodes/import/", node_views.node_import, name="node_import"),
    path("nodes/test-connection/", node_views.node_test_connection, name="node_test_connection"),
]
