"""Reports' public interface for the apps above it (alerts): the signals it sends after
commit (reclaim warnings, reclaims, appeals, the daily idle digest) and the digest's
content. Models and choices are public too; everything else is private."""

from __future__ import annotations

from reports.digest import build as build_digest
from reports.signals import appeal_event, idle_digest, reclaim_warned, reclaimed

__all__ = ["appeal_event", "build_digest", "idle_digest", "reclaim_warned", "reclaimed"]
