from django.urls import path

from pools import views

app_name = "pools"

urlpatterns = [
    path("pools/", views.pool_list, name="pool_list"),
    path("pools/add/", views.pool_add, name="pool_add"),
    path("pools/<slug:slug>/", views.pool_detail, name="pool_detail"),
    path("pools/<slug:slug>/edit/", views.pool_edit, name="pool_edit"),
    path("pools/<slug:slug>/delete/", views.pool_delete, name="pool_delete"),
    path("pools/<slug:slug>/cards/", views.pool_cards_add, name="pool_cards_add"),
    path(
        "pools/<slug:slug>/cards/<int:gpu_id>/remove/",
        views.pool_card_remove,
        name="pool_card_remove",
    ),
    path("pools/<slug:slug>/nodes/<int:node_id>/drain/", views.node_drain, name="node_drain"),
    path("pools/<slug:slug>/nodes/<int:node_id>/undrain/", views.node_undrain, name="node_undrain"),
    path(
        "pools/<slug:slug>/cards/<int:gpu_id>/clear-cordon/",
        views.card_clear_cordon,
        name="card_clear_cordon",
    ),
    path("allocations/<int:pk>/", views.allocation_detail, name="allocation_detail"),
]
