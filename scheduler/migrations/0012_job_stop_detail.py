# A failed rank's stop keeps what failed apart from its cause: stop_cause "failed", stop_detail "rank 0 exited with 3"
# (until now written together as "failed: rank 0 exited with 3").

from django.db import migrations, models

PREFIX = "failed: "


def split_failed(apps, schema_editor):
    Job = apps.get_model("scheduler", "Job")
    for job in Job.objects.filter(stop_cause__startswith=PREFIX).only("pk", "stop_cause"):
        Job.objects.filter(pk=job.pk).update(stop_cause="failed", stop_detail=job.stop_cause[len(PREFIX):])


def join_failed(apps, schema_editor):
    Job = apps.get_model("scheduler", "Job")
    for job in Job.objects.filter(stop_cause="failed").exclude(stop_detail="").only("pk", "stop_detail"):
        Job.objects.filter(pk=job.pk).update(stop_cause=(PREFIX + job.stop_detail)[:200])


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0011_restart_overhead'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='stop_detail',
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.RunPython(split_failed, join_failed),
    ]
