"""The demo's teams (``manage.py demo``): two tenants, an approver and two developers, their
quotas in the demo pool, and a day of GPU requests told through the request services.

People are seeded at every start (their passwords kept by the caller, under var/); the
tenants and the day's story once, on the first start: tenants, roles and quotas set up a
day ago, requests asked, approved, rejected, placed and released through the day, so the
demo starts with allocations of the developers, a request waiting for approval, one
about to expire and one idle. The story runs each step through the services at its own
moment (see ``_story_clock``), so every row, notice and audit entry is what the portal
would have written then. Wired in by the project's demo command.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.utils import timezone

from pools.interface import Ask
from pools.models import Pool
from quotas.choices import Role
from quotas.models import GpuRequest, Tenant
from quotas.requests import lifecycle, services
from quotas.tenancy import services as tenancy

log = logging.getLogger(__name__)

GIB = 1024
# username -> (what they do, their role per tenant slug)
PEOPLE = {
    "mei": ("approver", {"vision": Role.APPROVER, "speech": Role.APPROVER}),
    "ana": ("developer", {"vision": Role.MEMBER}),
    "ben": ("developer", {"speech": Role.MEMBER}),
}
# Holds a slice in the story and runs nothing in it: the simulator's --idle-owner.
IDLE_OWNER = "mei"
TENANTS = {
    "vision": ("Vision", "Image models: detection and segmentation."),
    "speech": ("Speech", "Speech recognition and synthesis."),
}
QUOTAS = {
    "vision": {
        "guaranteed_vgpus": 4, "limit_vgpus": 10, "guaranteed_compute_pct": 200,
        "limit_compute_pct": 800, "guaranteed_memory_mib": 80 * GIB,
        "limit_memory_mib": 400 * GIB, "guaranteed_gpu_hours": 200, "limit_gpu_hours": 2000,
        "auto_approve_vgpus": 1, "auto_approve_compute_pct": 50, "auto_approve_hours": 8,
    },
    "speech": {
        "guaranteed_vgpus": 2, "limit_vgpus": 6, "guaranteed_compute_pct": 100,
        "limit_compute_pct": 400, "guaranteed_memory_mib": 40 * GIB,
        "limit_memory_mib": 200 * GIB, "guaranteed_gpu_hours": 100, "limit_gpu_hours": 1000,
        "auto_approve_vgpus": 1, "auto_approve_compute_pct": 30, "auto_approve_hours": 4,
    },
}  # fmt: skip
# The speech team's quota in the Ascend and Hygon pool (its own: quotas are per pool).
DOMESTIC_QUOTA = {
    "guaranteed_vgpus": 2, "limit_vgpus": 8, "guaranteed_compute_pct": 100,
    "limit_compute_pct": 800, "guaranteed_memory_mib": 64 * GIB,
    "limit_memory_mib": 512 * GIB, "guaranteed_gpu_hours": 50, "limit_gpu_hours": 1000,
    "auto_approve_vgpus": 1, "auto_approve_compute_pct": 50, "auto_approve_hours": 8,
}  # fmt: skip
# The live slices of the story by label (its sizes; the idle report's browser test places
# them too): the training run and the benchmark are busy, the notebook idle.
SLICES = (
    ("notebook", Ask(compute_pct=30, memory_mib=8 * GIB)),
    ("training", Ask(count=2, compute_pct=50, memory_mib=20 * GIB)),
    ("inference", Ask(compute_pct=25, memory_mib=10 * GIB)),
    ("benchmark", Ask(whole_card=True)),
)
STORY_HOURS = 24


def seed_people(passwords: dict[str, str]) -> None:
    """The demo's users with their passwords (kept, or set back to the given ones)."""
    for username, password in passwords.items():
        user, _ = get_user_model().objects.get_or_create(username=username)
        if not user.check_password(password):
            user.set_password(password)
            user.save()


@contextmanager
def _story_clock(now: datetime) -> Iterator[Callable[[int], None]]:
    """``timezone.now()`` reads the story's clock while it is told: ``at(minutes)`` sets
    it to that many minutes before ``now``. The services read the clock themselves (none
    takes a moment), and the story runs alone, before the demo's server and schedule
    start, so nothing else reads the clock meanwhile."""
    moment = [now]
    real = timezone.now
    timezone.now = lambda: moment[0]

    def at(minutes_before: int) -> None:
        moment[0] = now - timedelta(minutes=minutes_before)

    try:
        yield at
    finally:
        timezone.now = real


def seed_story(admin, pool: Pool, models: Sequence[str], now: datetime | None = None) -> bool:
    """The tenants and the day's requests, once (True when told now). ``models``: the
    fleet's GPU models, asked for by name (A100, H100, L40S, T4 in the demo); a step
    the fleet cannot hold is left out."""
    if Tenant.objects.filter(slug__in=TENANTS).exists():
        return False
    users = {u.username: u for u in get_user_model().objects.filter(username__in=PEOPLE)}
    now = (now or timezone.now()).replace(second=0, microsecond=0)
    with _story_clock(now) as at:
        at(STORY_HOURS * 60)
        tenants = _teams(admin, pool, users)
        _day(at, admin, pool, users, tenants, models)
    return True


def _teams(admin, pool: Pool, users: dict) -> dict[str, Tenant]:
    tenants = {}
    for slug, (name, description) in TENANTS.items():
        # The platform admin is each team's first admin, as on the new-tenant page.
        tenant = tenancy.create_tenant(
            admin, admin=admin.get_username(), name=name, slug=slug, description=description
        )
        for username, (_, roles) in PEOPLE.items():
            if slug in roles and username in users:
                tenancy.add_member(tenant.pk, admin, username=username, role=roles[slug])
        tenancy.create_quota(admin, tenant=tenant, pool=pool, **QUOTAS[slug])
        tenants[slug] = tenant
    return tenants


def _day(at, admin, pool: Pool, users: dict, tenants: dict, models: Sequence[str]) -> None:
    """The day, hour by hour (minutes before now)."""
    a100, h100, l40s, t4 = (list(models) + [""] * 4)[:4]
    ana, ben, mei = users.get("ana"), users.get("ben"), users.get("mei")
    vision, speech = tenants["vision"], tenants["speech"]

    def ask(minutes: int, user, tenant, label: str, model: str, **fields) -> GpuRequest | None:
        at(minutes)
        if user is None:
            return None
        try:
            return services.create_request(
                user, tenant=tenant, pool=pool, gpu_model=model, reason=fields.pop("reason"),
                **fields,
            )  # fmt: skip
        except ValidationError as exc:
            log.info("demo request %s left out: %s", label, exc.messages)
            return None

    def decide(minutes: int, req: GpuRequest | None, user, approve: bool, comment: str) -> None:
        at(minutes)
        if req is not None and user is not None:
            services.decide(req.pk, user, approve=approve, comment=comment)

    slices = dict(SLICES)
    training = ask(23 * 60, ana, vision, "training", a100, count=2,
                   compute_pct=slices["training"].compute_pct,
                   memory_mib=slices["training"].memory_mib,
                   reason="Train the detector on the new street-scene set.")  # fmt: skip
    decide(22 * 60 + 45, training, mei, True, "Go ahead.")
    benchmark = ask(22 * 60, ben, speech, "benchmark", h100, whole_card=True,
                    duration_hours=48,
                    reason="Throughput benchmark of the new acoustic model.")  # fmt: skip
    decide(21 * 60 + 50, benchmark, mei, True, "Two days, as agreed.")
    segmentation = ask(21 * 60 + 30, ana, vision, "segmentation", a100, count=3,
                       whole_card=True, duration_hours=36,
                       reason="Segmentation model, three cards data-parallel.")  # fmt: skip
    decide(21 * 60 + 20, segmentation, mei, True, "")
    # The approver's own request: a platform admin decides it. She never uses it.
    notebook = ask(21 * 60, mei, vision, "notebook", a100,
                   compute_pct=slices["notebook"].compute_pct,
                   memory_mib=slices["notebook"].memory_mib,
                   reason="A notebook to look through the labelled data.")  # fmt: skip
    decide(20 * 60 + 50, notebook, admin, True, "")
    inference = ask(18 * 60, ben, speech, "inference", l40s,
                    compute_pct=slices["inference"].compute_pct,
                    memory_mib=slices["inference"].memory_mib,
                    reason="Serve the speech recognizer to the QA team.")  # fmt: skip
    decide(17 * 60 + 50, inference, mei, True, "")
    search = ask(16 * 60, ana, vision, "search", a100, whole_card=True, duration_hours=12,
                 reason="Hyper-parameter search.")  # fmt: skip
    decide(15 * 60 + 30, search, mei, False,
           "A whole card is more than a search needs: ask for a slice.")  # fmt: skip
    tts = ask(14 * 60, ben, speech, "tts", l40s, count=2, compute_pct=60, memory_mib=24 * GIB,
              reason="Train the new text-to-speech voice.")  # fmt: skip
    decide(13 * 60 + 40, tts, mei, True, "")
    augment = ask(10 * 60, ana, vision, "augment", t4, count=2, compute_pct=50,
                  memory_mib=8 * GIB, reason="Data augmentation workers.")  # fmt: skip
    decide(9 * 60 + 45, augment, mei, True, "")
    # Within the policy: approved and placed at once; released when done.
    sweep = ask(12 * 60, ana, vision, "sweep", h100, compute_pct=40, memory_mib=16 * GIB,
                duration_hours=6, reason="Learning-rate sweep.")  # fmt: skip
    at(7 * 60)
    if sweep is not None and ana is not None:
        lifecycle.release_request(sweep.pk, ana)
    # Waiting for approval past the tenant's 4 hours: escalated at the first sweep.
    ask(5 * 60, ana, vision, "full run", a100, count=2, whole_card=True, duration_hours=12,
        reason="Full training run of the detector.")  # fmt: skip
    # Within the policy, for 2 hours: it expires a minute after the story ends.
    ask(2 * 60 - 1, ben, speech, "evaluation", t4, compute_pct=20, memory_mib=6 * GIB,
        duration_hours=2, reason="Evaluate last night's checkpoint.")  # fmt: skip


def seed_domestic(admin, pool: Pool) -> bool:
    """The speech team's quota in the Ascend and Hygon pool and two requests there, once
    (True when made now): an Ascend slice within the policy, placed at once (its launch
    settings name HAMi's Ascend resources), and a Hygon whole card waiting for approval."""
    speech = Tenant.objects.filter(slug="speech").first()
    ben = get_user_model().objects.filter(username="ben").first()
    if speech is None or ben is None or speech.quotas.filter(pool=pool).exists():
        return False
    tenancy.create_quota(admin, tenant=speech, pool=pool, **DOMESTIC_QUOTA)
    asks = (
        ("Ascend 910B2C", {"compute_pct": 50, "memory_mib": 16 * GIB, "duration_hours": 8},
         "Try the speech recognizer on an Ascend NPU."),
        ("DCU K100_AI", {"whole_card": True, "duration_hours": 24},
         "Port the acoustic model to the Hygon DCU."),
    )  # fmt: skip
    for model, fields, reason in asks:
        try:
            services.create_request(ben, tenant=speech, pool=pool, gpu_model=model,
                                    reason=reason, **fields)  # fmt: skip
        except ValidationError as exc:
            log.info("demo request on %s left out: %s", model, exc.messages)
    return True
