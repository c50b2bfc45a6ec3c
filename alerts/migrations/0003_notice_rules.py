from django.db import migrations, models

NEW_RULES = (
    {"key": "reclaim-notices", "name": "Reclaim notices", "condition": "reclaim_notice",
     "severity": "info", "renotify_seconds": 0},
    {"key": "idle-digest", "name": "Daily idle GPU digest", "condition": "idle_digest",
     "severity": "info", "renotify_seconds": 0},
)  # fmt: skip


def add_notice_rules(apps, schema_editor):
    # Written out here, not read from alerts.defaults: a later change there must not
    # change what this migration did.
    Rule = apps.get_model("alerts", "Rule")
    for values in NEW_RULES:
        Rule.objects.get_or_create(key=values["key"], defaults={**values, "builtin": True})


def remove_notice_rules(apps, schema_editor):
    keys = [values["key"] for values in NEW_RULES]
    apps.get_model("alerts", "Rule").objects.filter(key__in=keys).delete()


class Migration(migrations.Migration):
    dependencies = [("alerts", "0002_rules")]

    operations = [
        migrations.AlterField(
            model_name="rule",
            name="condition",
            field=models.CharField(choices=[("temperature_c", "GPU temperature (°C)"), ("memory_used_pct", "GPU memory used (%)"), ("utilization_gpu_pct", "GPU utilization (%)"), ("power_pct", "Power draw (percent of the limit)"), ("allocation_utilization_pct", "Utilization of an allocated card over the window (%)"), ("xid", "XID error"), ("ecc_uncorrectable", "Uncorrectable ECC errors"), ("gpu_lost", "GPU lost (fallen off the bus)"), ("node_offline", "Node offline"), ("process_unallocated", "Process without an allocation"), ("process_over_slice", "Process over its slice"), ("request_pending", "Request pending (hours)"), ("quota_used_pct", "Quota used (%)"), ("allocation_expiring", "Allocation expiring within (hours)"), ("reclaim_warning", "Borrowed capacity to be taken back"), ("alertmanager", "Prometheus Alertmanager alert"), ("request_notice", "GPU request notice"), ("reclaim_notice", "Reclaim notice"), ("idle_digest", "Daily idle GPU digest")], max_length=32, verbose_name="condition"),
        ),
        migrations.RunPython(add_notice_rules, remove_notice_rules),
    ]
