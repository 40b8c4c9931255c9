from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("licensing", "0016_course_audit_actions"),
    ]

    operations = [
        migrations.AddField(
            model_name="institution",
            name="language",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="Default language of the institution's pages, e.g. de; empty = the gateway's",
                max_length=16,
            ),
        ),
    ]
