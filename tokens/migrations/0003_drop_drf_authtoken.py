# DRF's authtoken app is gone (its keys were stored in clear): drop its table where an
# older installation still has it. Nothing reads it any more; there is no way back.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("tokens", "0002_service_account")]

    operations = [
        migrations.RunSQL("DROP TABLE IF EXISTS authtoken_token", migrations.RunSQL.noop),
    ]
