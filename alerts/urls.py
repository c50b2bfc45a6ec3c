from django.urls import path

from alerts import config_views, event_views, views

app_name = "alerts"

urlpatterns = [
    path("alerts/channels/", views.channel_list, name="channel_list"),
    path("alerts/channels/add/", views.channel_add, name="channel_add"),
    path("alerts/channels/<int:pk>/", views.channel_detail, name="channel_detail"),
    path("alerts/channels/<int:pk>/edit/", views.channel_edit, name="channel_edit"),
    path("alerts/channels/<int:pk>/test/", views.channel_test, name="channel_test"),
    path("alerts/channels/<int:pk>/delete/", views.channel_delete, name="channel_delete"),
    path("alerts/rules/", config_views.rule_list, name="rule_list"),
    path("alerts/rules/add/", config_views.rule_add, name="rule_add"),
    path("alerts/rules/<int:pk>/edit/", config_views.rule_edit, name="rule_edit"),
    path("alerts/rules/<int:pk>/toggle/", config_views.rule_toggle, name="rule_toggle"),
    path("alerts/rules/<int:pk>/delete/", config_views.rule_delete, name="rule_delete"),
    path("alerts/subscriptions/", config_views.subscription_list, name="subscription_list"),
    path("alerts/subscriptions/add/", config_views.subscription_add, name="subscription_add"),
    path(
        "alerts/subscriptions/<int:pk>/edit/",
        config_views.subscription_edit,
        name="subscription_edit",
    ),
    path(
        "alerts/subscriptions/<int:pk>/delete/",
        config_views.subscription_delete,
        name="subscription_delete",
    ),
    path("alerts/events/", event_views.event_list, name="event_list"),
    path("alerts/events/firing/", event_views.firing_strip, name="event_firing"),
    path("alerts/events/<int:pk>/", event_views.event_detail, name="event_detail"),
    path(
        "alerts/events/<int:pk>/acknowledge/",
        event_views.event_acknowledge,
        name="event_acknowledge",
    ),
    path("alerts/events/<int:pk>/resolve/", event_views.event_resolve, name="event_resolve"),
]
