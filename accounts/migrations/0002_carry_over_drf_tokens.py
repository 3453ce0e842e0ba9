# The tokens DRF's authtoken app handed out before (one per user, no expiry) keep working after the upgrade,
# now as ordinary API tokens: their digest is stored, and they expire ALLOT_TOKEN_DAYS from the upgrade.

import hashlib
from datetime import timedelta

from django.conf import settings
from django.db import migrations
from django.utils import timezone


def carry_over(apps, schema_editor):
    connection = schema_editor.connection
    if "authtoken_token" not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("accounts", "ApiToken")
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT key, user_id, created FROM authtoken_token")
        rows = cursor.fetchall()
    ApiToken.objects.bulk_create([
        ApiToken(user_id=user_id, name="token from before tokens expired", prefix=key[:8],
                 digest=hashlib.sha256(key.encode("ascii")).hexdigest(), created_at=created,
                 expires_at=now + timedelta(days=settings.ALLOT_TOKEN_DAYS))
        for key, user_id, created in rows
    ], ignore_conflicts=True)


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0001_api_tokens"),
    ]

    operations = [migrations.RunPython(carry_over, migrations.RunPython.noop)]
