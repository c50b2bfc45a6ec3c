"""Where alert events and notices come from, one module per source, each over
``alerts.rules`` (the enabled rules, their version, an occurrence's fingerprint) and
``alerts.events`` / ``alerts.recipients`` (fire, resolve, route to subscribed channels):

- ``metrics``: the rules evaluated after each poll cycle (telemetry's hook);
- ``business``: requests waiting, quotas used, allocations expiring (a beat task);
- ``reclaim``: reports' reclaim warnings, their notices and the daily idle digest;
- ``request_notices``: each step of a GPU request to the people concerned;
- ``alertmanager``: a Prometheus Alertmanager's webhook.

``alerts.tasks`` sits on top of them; no source imports it (tests/test_boundaries.py).
"""
