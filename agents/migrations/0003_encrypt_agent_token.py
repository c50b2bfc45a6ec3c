# Agent tokens move from a plaintext column to a Fernet-encrypted one (portal.crypto).
# Reversible: going back decrypts into the plaintext column again, with the keys configured
# at that time.

from django.db import migrations, models

from portal import crypto


def _hint(token: str) -> str:
    # Frozen here: the model's helper may change, a migration must not.
    if not token:
        return ""
    return "…" + token[-4:] if len(token) >= 12 else "…"


def encrypt_tokens(apps, schema_editor):
    Node = apps.get_model("agents", "Node")
    for node in Node.objects.exclude(agent_token="").only("pk", "agent_token"):
        Node.objects.filter(pk=node.pk).update(
            agent_token_encrypted=crypto.encrypt(node.agent_token),
            agent_token_hint=_hint(node.agent_token),
        )


def decrypt_tokens(apps, schema_editor):
    Node = apps.get_model("agents", "Node")
    for node in Node.objects.exclude(agent_token_encrypted="").only("pk", "agent_token_encrypted"):
        Node.objects.filter(pk=node.pk).update(
            agent_token=crypto.decrypt(node.agent_token_encrypted)
        )


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0002_rollups"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="agent_token_encrypted",
            field=models.TextField(blank=True, default="", verbose_name="agent token (encrypted)"),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="node",
            name="agent_token_hint",
            field=models.CharField(
                blank=True, default="", max_length=8, verbose_name="agent token hint"
            ),
            preserve_default=False,
        ),
        migrations.RunPython(encrypt_tokens, decrypt_tokens),
        migrations.RemoveField(model_name="node", name="agent_token"),
    ]
