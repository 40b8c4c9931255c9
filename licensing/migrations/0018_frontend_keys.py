"""Front-end keys (issue 37): `ApiKey.kind` (a database default, so that a worker still on the
previous release inserts standard keys during a rolling upgrade), a front-end key never being
one student's own key, and the index by which a front-end key finds a student by the e-mail
their identity provider verified (licensing.access.frontend). Both tables are small: the check
and the index are built in one short lock."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('licensing', '0017_institution_language'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='apikey',
            name='kind',
            field=models.CharField(choices=[('standard', 'API key'), ('front_end', 'Front-end key')], db_default='standard', default='standard', help_text="A front-end key (Open WebUI) acts for the students its requests name by e-mail: each pays from their own allowance under their course's rules.", max_length=16, verbose_name='kind'),
        ),
        migrations.AddIndex(
            model_name='ssoidentity',
            index=models.Index(fields=['provider', 'email'], name='sso_identity_email'),
        ),
        migrations.AddConstraint(
            model_name='apikey',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('kind', 'front_end'), _negated=True), ('end_user__isnull', True), _connector='OR'), name='front_end_key_has_no_end_user'),
        ),
    ]
