"""Summary keys for the events stored before them, where their text has a shape the
sources wrote (alerts/summaries.py): a metric's value, an event rule's condition, a
request waiting or expiring, a quota used, a reclaim warning. Any other text is left as
it is, and shown as stored."""

import re

from django.db import migrations

# Written out here, not read from alerts: a later change there must not change what this
# migration did. The shapes are those of the sources before keys.
VALUE_CONDITIONS = {"temperature_c", "memory_used_pct", "utilization_gpu_pct", "power_pct",
                    "allocation_utilization_pct", "process_unallocated",
                    "process_over_slice", "xid", "ecc_uncorrectable"}  # fmt: skip
NO_VALUE_CONDITIONS = {"gpu_lost", "node_offline", "process_unallocated", "process_over_slice"}
METRIC = re.compile(
    r"(?P<value>-?[0-9.]+)(?: °C| %| MiB)?"
    r"(?: \((?P<sign>[<>]) (?P<threshold>-?[0-9.e+]+)(?: °C| %| MiB)?\))?"
)
PENDING = re.compile(r"request (?P<request>\d+) by (?P<requester>.+) pending (?P<hours>[0-9.]+) h")
EXPIRING = re.compile(
    r"request (?P<request>\d+) by (?P<requester>.+) expires in (?P<minutes>[0-9.]+) min"
)
QUOTA = re.compile(
    r"(?P<tenant>.+) in (?P<pool>.+): (?P<percent>[0-9.]+) % of (?P<dimension>vGPUs|compute %|"
    r"memory MiB|GPU-hours) used \((?P<used>[0-9.]+) of (?P<limit>[0-9.]+)\)"
)
DIMENSIONS = {"vGPUs": "vgpus", "compute %": "compute_pct", "memory MiB": "memory_mib",
              "GPU-hours": "gpu_hours"}  # fmt: skip
BATCH = 500


def _metric(event, condition):
    prefix = f"{event.scope}: "
    if not event.scope or not event.summary.startswith(prefix):
        return None
    rest = event.summary[len(prefix) :]
    params = {"scope": event.scope, "condition": condition}
    if "value" not in (event.labels or {}):
        return ("metric.condition", params) if condition in NO_VALUE_CONDITIONS else None
    match = METRIC.fullmatch(rest)
    if condition not in VALUE_CONDITIONS or match is None:
        return None
    params["value"] = float(match["value"])
    if match["sign"]:
        params.update(threshold=float(match["threshold"]),
                      comparison="gt" if match["sign"] == ">" else "lt")  # fmt: skip
    return "metric.value", params


def _business(event, condition):
    if condition == "request_pending" and (match := PENDING.fullmatch(event.summary)):
        return "request.pending", {"request": int(match["request"]),
                                   "requester": match["requester"],
                                   "hours": float(match["hours"])}  # fmt: skip
    if condition == "allocation_expiring" and (match := EXPIRING.fullmatch(event.summary)):
        return "request.expiring", {"request": int(match["request"]),
                                    "requester": match["requester"],
                                    "minutes": float(match["minutes"])}  # fmt: skip
    if condition == "quota_used_pct" and (match := QUOTA.fullmatch(event.summary)):
        return "quota.used", {"tenant": match["tenant"], "pool": match["pool"],
                              "dimension": DIMENSIONS[match["dimension"]],
                              "percent": float(match["percent"]), "used": float(match["used"]),
                              "limit": float(match["limit"])}  # fmt: skip
    labels = event.labels or {}
    needed = ("lease", "owner", "pool", "release_after")
    if condition == "reclaim_warning" and all(isinstance(labels.get(k), str) for k in needed):
        return "reclaim.warned", {key: labels[key] for key in needed}
    return None


def key_of(event, condition):
    """(key, parameters) for an old event's text, or None when it has no known shape."""
    try:
        return _metric(event, condition) or _business(event, condition)
    except (ValueError, TypeError):
        return None


def fill_summary_keys(apps, schema_editor):
    Event = apps.get_model("alerts", "Event")
    conditions = dict(apps.get_model("alerts", "Rule").objects.values_list("pk", "condition"))
    changed = []
    rows = Event.objects.filter(summary_key="", rule__isnull=False).exclude(summary="")
    for event in rows.only("pk", "rule_id", "scope", "labels", "summary").iterator(BATCH):
        found = key_of(event, conditions.get(event.rule_id, ""))
        if found is not None:
            event.summary_key, event.summary_params = found
            changed.append(event)
        if len(changed) >= BATCH:
            Event.objects.bulk_update(changed, ["summary_key", "summary_params"])
            changed = []
    Event.objects.bulk_update(changed, ["summary_key", "summary_params"])


class Migration(migrations.Migration):
    dependencies = [("alerts", "0005_event_summary_key")]

    operations = [migrations.RunPython(fill_summary_keys, migrations.RunPython.noop)]
