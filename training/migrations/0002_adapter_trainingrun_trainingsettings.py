# Adapters, training runs and per-profile training settings.

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('routing', '0001_initial'),
        ('training', '0001_initial'),
    ]

    operations = [
        migrations.CreateModel(
            name='Adapter',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('version', models.PositiveIntegerField()),
                ('name', models.CharField(help_text='The LoRA name vLLM serves.', max_length=200, unique=True)),
                ('path', models.CharField(help_text='Folder of the PEFT adapter.', max_length=500)),
                ('base_model', models.CharField(max_length=500)),
                ('status', models.CharField(choices=[('candidate', 'Candidate'), ('active', 'Active'), ('retired', 'Retired'), ('failed', 'Failed')], default='candidate', max_length=12)),
                ('metrics', models.JSONField(blank=True, default=dict)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('activated_at', models.DateTimeField(blank=True, null=True)),
                ('retired_at', models.DateTimeField(blank=True, null=True)),
                ('rolled_back_at', models.DateTimeField(blank=True, help_text='Set when a rollback retired it: never a rollback target again.', null=True)),
                ('loaded_at', models.DateTimeField(blank=True, help_text="Loaded into the student's vLLM.", null=True)),
                ('unloaded_at', models.DateTimeField(blank=True, null=True)),
                ('parent', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='children', to='training.adapter')),
                ('profile', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='adapters', to='routing.taskprofile')),
            ],
        ),
        migrations.CreateModel(
            name='TrainingRun',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('sft', 'Sft'), ('grpo', 'Grpo'), ('sft_grpo', 'SFT then GRPO')], default='sft', max_length=12)),
                ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed')], default='queued', max_length=12)),
                ('step', models.PositiveIntegerField(default=0)),
                ('total_steps', models.PositiveIntegerField(default=0)),
                ('progress', models.JSONField(blank=True, default=list, help_text='[{"step", "phase", "loss", "reward", "t"}, ...] as it goes.')),
                ('hyperparameters', models.JSONField(blank=True, default=dict, help_text='Resolved, as trained.')),
                ('examples', models.JSONField(blank=True, default=list, help_text='The frozen data set: [{"messages": [...], "completion": "..."}].')),
                ('system_prompt', models.TextField(blank=True, help_text='SkillBook text put in front of every prompt.')),
                ('demonstration_ids', models.JSONField(blank=True, default=list)),
                ('demonstration_count', models.PositiveIntegerField(default=0)),
                ('metrics', models.JSONField(blank=True, default=dict)),
                ('log', models.TextField(blank=True)),
                ('error', models.TextField(blank=True)),
                ('attempts', models.PositiveSmallIntegerField(default=0, help_text='Times a worker claimed it.')),
                ('celery_task_id', models.CharField(blank=True, max_length=64)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('heartbeat_at', models.DateTimeField(blank=True, db_index=True, null=True)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('adapter', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='training.adapter')),
            ],
        ),
        migrations.CreateModel(
            name='TrainingSettings',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('hyperparameters', models.JSONField(blank=True, default=dict, help_text='Overrides, e.g. {"sft_steps": 60, "learning_rate": 0.0005}.')),
                ('base_model', models.CharField(blank=True, help_text='Base model folder; empty for the configured default.', max_length=500)),
                ('profile', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='training_settings', to='routing.taskprofile')),
            ],
            options={
                'verbose_name_plural': 'training settings',
            },
        ),
        migrations.AddConstraint(
            model_name='adapter',
            constraint=models.UniqueConstraint(fields=('profile', 'version'), name='adapter_profile_version'),
        ),
        migrations.AddConstraint(
            model_name='adapter',
            constraint=models.UniqueConstraint(condition=models.Q(('status', 'active')), fields=('profile',), name='adapter_one_active_per_profile'),
        ),
        migrations.AddIndex(
            model_name='trainingrun',
            index=models.Index(fields=['status', 'heartbeat_at'], name='trainingrun_status_heartbeat'),
        ),
    ]
