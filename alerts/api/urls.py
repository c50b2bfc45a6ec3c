from django.urls import path
from rest_framework.routers import SimpleRouter

from alerts.api.rule_views import (
    AlertmanagerWebhookView,
    EventViewSet,
    RuleViewSet,
    SubscriptionViewSet,
)
from alerts.api.views import ChannelViewSet

router = SimpleRouter()
router.register("alert-channels", ChannelViewSet, basename="alert-channel")
router.register("alert-rules", RuleViewSet, basename="alert-rule")
router.register("alert-subscriptions", SubscriptionViewSet, basename="alert-subscription")
router.register("alert-events", EventViewSet, basename="alert-event")

urlpatterns = [
    *router.urls,
    path("alertmanager/", AlertmanagerWebhookView.as_view(), name="alertmanager-webhook"),
]
