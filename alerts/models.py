"""Alert channels, events and their deliveries.

A channel is where a user's or a tenant's alerts go (an address, a robot, a webhook). Its
settings are checked by its kind's transport (``alerts.transports``); the secret parts
(robot URLs that carry their token, signing secrets) are kept encrypted, apart, and only
their hint is ever shown. A delivery is one message to one channel: an outbox row that
workers claim atomically, with one attempt row per try.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from agents.models import Node
from alerts import summaries
from alerts.choices import (
    CONDITION_KIND,
    OPEN_EVENT_STATES,
    ChannelKind,
    Comparison,
    Condition,
    DeliveryStatus,
    EventState,
    RuleKind,
    ScopeKind,
    Severity,
)
from alerts.defaults import rule_description, rule_label
from pools.models import Pool
from portal import crypto
from quotas.models import Tenant

ERROR_MAX_CHARS = 2000


class Channel(models.Model):
    name = models.CharField(_("name"), max_length=100)
    kind = models.CharField(_("kind"), max_length=16, choices=ChannelKind)
    # Exactly one owner: a user's own channel, or a tenant's (managed by its admins).
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True,
        related_name="alert_channels", verbose_name=_("owner"),
    )  # fmt: skip
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, null=True, blank=True,
        related_name="alert_channels", verbose_name=_("tenant"),
    )  # fmt: skip
    enabled = models.BooleanField(_("enabled"), default=True)
    # Why the portal turned it off (a permanent error such as a revoked robot key).
    disabled_reason = models.TextField(_("disabled because"), blank=True)
    # The language its messages are written in; empty: its owner's chosen language (a
    # user's own channel), else the site's default (alerts/messages.py).
    language = models.CharField(
        _("language"), max_length=16, blank=True, choices=settings.LANGUAGES
    )
    # The kind's non-secret settings, as its transport validated them.
    settings = models.JSONField(_("settings"), default=dict, blank=True)
    secrets_encrypted = models.TextField(_("secrets (encrypted)"), blank=True)
    secret_hint = models.CharField(_("secret hint"), max_length=80, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "pk"]
        verbose_name = _("alert channel")
        verbose_name_plural = _("alert channels")
        permissions = [("post_to_any_host", _("Can send alerts to any host"))]
        constraints = [
            models.CheckConstraint(
                condition=Q(owner__isnull=False, tenant__isnull=True)
                | Q(owner__isnull=True, tenant__isnull=False),
                name="alert_channel_has_one_owner",
            )
        ]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("alerts:channel_detail", args=[self.pk])

    @property
    def secrets(self) -> dict[str, str]:
        if not self.secrets_encrypted:
            return {}
        return json.loads(crypto.decrypt(self.secrets_encrypted))

    def set_secrets(self, values: dict[str, str]) -> None:
        kept = {key: value for key, value in values.items() if value}
        self.secrets_encrypted = crypto.encrypt(json.dumps(kept)) if kept else ""


class Rule(models.Model):
    """What to watch: a condition, its threshold and how long it must hold, where, and how
    loud. Events raised by a rule carry its key; subscriptions pick rules by id."""

    key = models.SlugField(_("key"), max_length=100, unique=True)
    name = models.CharField(_("name"), max_length=200)
    description = models.TextField(_("description"), max_length=2000, blank=True)
    condition = models.CharField(_("condition"), max_length=32, choices=Condition)
    comparison = models.CharField(
        _("comparison"), max_length=2, choices=Comparison, default=Comparison.ABOVE
    )
    threshold = models.FloatField(_("threshold"), null=True, blank=True)
    # How long the condition must hold before it fires (for windowed conditions: the window).
    for_seconds = models.PositiveIntegerField(_("for (seconds)"), default=0)
    severity = models.CharField(
        _("severity"), max_length=16, choices=Severity, default=Severity.WARNING
    )
    scope_kind = models.CharField(
        _("scope"), max_length=16, choices=ScopeKind, default=ScopeKind.ALL
    )
    pool = models.ForeignKey(
        Pool, on_delete=models.CASCADE, null=True, blank=True, related_name="+",
        verbose_name=_("pool"),
    )  # fmt: skip
    node = models.ForeignKey(
        Node, on_delete=models.CASCADE, null=True, blank=True, related_name="+",
        verbose_name=_("node"),
    )  # fmt: skip
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="alert_rules",
        verbose_name=_("tenant"),
    )  # fmt: skip
    # An event still firing is told again after this long; 0: once. A rule that resolves and
    # fires again within it reopens its event silently (a flapping card floods nobody).
    renotify_seconds = models.PositiveIntegerField(_("re-notify after (seconds)"), default=3600)
    enabled = models.BooleanField(_("enabled"), default=True)
    builtin = models.BooleanField(_("built in"), default=False, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "pk"]
        verbose_name = _("alert rule")
        verbose_name_plural = _("alert rules")

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("alerts:rule_edit", args=[self.pk])

    @property
    def kind(self) -> str:
        return CONDITION_KIND.get(self.condition, RuleKind.EXTERNAL)

    @property
    def label(self) -> str:
        """The name in the reader's language (alerts.defaults.rule_label)."""
        return rule_label(self.key, self.name)

    @property
    def explanation(self) -> str:
        return rule_description(self.key, self.description)


class Event(models.Model):
    """Something that fired. Open events are unique per fingerprint: firing again while
    open updates the one event instead of making another (de-duplication)."""

    rule = models.ForeignKey(
        Rule, on_delete=models.SET_NULL, null=True, blank=True, related_name="events",
        verbose_name=_("rule"),
    )  # fmt: skip
    rule_key = models.CharField(_("rule"), max_length=100)
    rule_name = models.CharField(_("rule name"), max_length=200)
    severity = models.CharField(
        _("severity"), max_length=16, choices=Severity, default=Severity.WARNING
    )
    # What it is about, e.g. "node:gpu-01" or "tenant:ml-team".
    scope = models.CharField(_("scope"), max_length=255, blank=True)
    fingerprint = models.CharField(_("fingerprint"), max_length=64)
    state = models.CharField(
        _("state"), max_length=16, choices=EventState, default=EventState.FIRING
    )
    tenant = models.ForeignKey(
        Tenant, on_delete=models.SET_NULL, null=True, blank=True, related_name="alert_events"
    )
    labels = models.JSONField(_("labels"), default=dict, blank=True)
    # What happened, as a key of alerts.summaries and its parameters, written in the
    # reader's language when shown; the text column is the site language's rendering (and
    # all there is for events from before keys, and Alertmanager's own text).
    summary_key = models.CharField(_("summary key"), max_length=64, blank=True)
    summary_params = models.JSONField(_("summary parameters"), default=dict, blank=True)
    summary = models.TextField(_("summary"), max_length=2000, blank=True)
    # Where a rule checked each poll cycle keeps this event's state in Redis
    # ("<node id>|<rule id>|<target>"), so that state can be rebuilt after Redis lost it.
    state_key = models.CharField(_("evaluation key"), max_length=200, blank=True)
    started_at = models.DateTimeField(_("started"))
    last_seen_at = models.DateTimeField(_("last seen"))
    acknowledged_at = models.DateTimeField(_("acknowledged"), null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )  # fmt: skip
    resolved_at = models.DateTimeField(_("resolved"), null=True, blank=True)
    last_notified_at = models.DateTimeField(_("last notified"), null=True, blank=True)
    # When subscribers were last sent this event and in which state (routing, not delivery:
    # a channel that is down must not make every cycle send it again).
    routed_at = models.DateTimeField(_("last sent"), null=True, blank=True)
    routed_state = models.CharField(_("last sent as"), max_length=16, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["state", "-started_at"])]
        verbose_name = _("alert event")
        verbose_name_plural = _("alert events")
        constraints = [
            models.UniqueConstraint(
                fields=["fingerprint"],
                condition=Q(state__in=OPEN_EVENT_STATES),
                name="one_open_event_per_fingerprint",
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule_label} ({self.scope})" if self.scope else self.rule_label

    def get_absolute_url(self) -> str:
        return reverse("alerts:event_detail", args=[self.pk])

    @property
    def rule_label(self) -> str:
        """The rule's name in the reader's language, as the event recorded it."""
        return rule_label(self.rule_key, self.rule_name)

    @property
    def summary_text(self) -> str:
        """The summary in the active language (alerts.summaries), else the stored text.
        Plain text: templates escape it."""
        return summaries.render(self.summary_key, self.summary_params, self.summary)


class Delivery(models.Model):
    """One message to one channel. Workers claim it with a conditional update on
    ``claimed_at``; a claim older than ALERT_CLAIM_TIMEOUT was abandoned (the worker died)
    and may be taken again, so a killed worker loses nothing."""

    event = models.ForeignKey(
        Event, on_delete=models.CASCADE, null=True, blank=True, related_name="deliveries"
    )
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    # A "send test" message (no event).
    test = models.BooleanField(_("test"), default=False)
    # A GPU request notice (no event): {"kind", "request", "comment"}.
    notice = models.JSONField(_("notice"), null=True, blank=True)
    status = models.CharField(
        _("status"), max_length=16, choices=DeliveryStatus, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    next_attempt_at = models.DateTimeField(_("next attempt"))
    claimed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True)
    created = models.DateTimeField(_("created"), auto_now_add=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)

    class Meta:
        ordering = ["-created", "-pk"]
        verbose_name = _("delivery")
        verbose_name_plural = _("deliveries")
        indexes = [models.Index(fields=["status", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.channel} #{self.pk}"


class Subscription(models.Model):
    """Who wants which events on which channel: a user's own, or a tenant's (managed by
    its admins). Empty rules: every rule. Deliveries inside the quiet hours wait for
    their end, except critical ones."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True,
        related_name="alert_subscriptions", verbose_name=_("owner"),
    )  # fmt: skip
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, null=True, blank=True,
        related_name="alert_subscriptions", verbose_name=_("tenant"),
    )  # fmt: skip
    channel = models.ForeignKey(
        Channel, on_delete=models.CASCADE, related_name="subscriptions", verbose_name=_("channel")
    )
    rules = models.ManyToManyField(Rule, blank=True, related_name="subscriptions",
                                   verbose_name=_("rules"))  # fmt: skip
    min_severity = models.CharField(
        _("lowest severity"), max_length=16, choices=Severity, default=Severity.WARNING
    )
    scope_kind = models.CharField(
        _("scope"), max_length=16, choices=ScopeKind, default=ScopeKind.ALL
    )
    # The pool's or tenant's slug, or the node's name, when the scope is one of them.
    scope_name = models.CharField(_("scope name"), max_length=255, blank=True)
    quiet_start = models.TimeField(_("quiet from"), null=True, blank=True)
    quiet_end = models.TimeField(_("quiet until"), null=True, blank=True)
    enabled = models.BooleanField(_("enabled"), default=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pk"]
        verbose_name = _("subscription")
        verbose_name_plural = _("subscriptions")
        constraints = [
            models.CheckConstraint(
                condition=Q(owner__isnull=False, tenant__isnull=True)
                | Q(owner__isnull=True, tenant__isnull=False),
                name="alert_subscription_has_one_owner",
            )
        ]

    def __str__(self) -> str:
        return f"{self.channel} #{self.pk}"

    def get_absolute_url(self) -> str:
        return reverse("alerts:subscription_edit", args=[self.pk])


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField(_("attempt"))
    started_at = models.DateTimeField(_("time"))
    duration_ms = models.PositiveIntegerField(_("duration (ms)"))
    ok = models.BooleanField(_("delivered"))
    permanent = models.BooleanField(_("permanent error"), default=False)
    error = models.TextField(_("error"), blank=True)

    class Meta:
        ordering = ["-started_at", "-pk"]
        verbose_name = _("delivery attempt")
        verbose_name_plural = _("delivery attempts")
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="one_attempt_per_number")
        ]

    def __str__(self) -> str:
        return f"{self.delivery} · {self.number}"
