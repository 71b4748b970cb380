# A profile's admitted LoRA adapter (written by training's admission through a routing service).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('routing', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='taskprofile',
            name='student_adapter',
            field=models.CharField(blank=True, help_text="Admitted LoRA adapter for this profile; overrides the student backend's adapter when set.", max_length=200),
        ),
    ]
