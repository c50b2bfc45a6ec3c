"""What pools does when telemetry records a cycle or slices change; connected in
``PoolsConfig.ready``. Each runs after the sender's transaction committed."""

from __future__ import annotations

import logging

from pools import live, membership

log = logging.getLogger(__name__)


def on_poll_cycle(sender, cycle, **kwargs) -> None:
    """New cards join the rule pools that match them; watched pool pages get readings."""
    membership.join_new_cards(cycle.answered)
    live.publish_usage(cycle.answered)


def on_desired_state_changed(sender, node_ids, **kwargs) -> None:
    live.nodes_changed(node_ids)
