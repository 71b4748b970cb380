import contextlib
import os
import secrets
from pathlib import Path

from django.apps import AppConfig, apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models.signals import post_migrate

from app import conf
from core import jobs_conf


def var_prepare() -> None:
    """What the settings name but importing them never writes: VAR_DIR, the static folder, the
    filesystem broker's folders and, when SECRET_KEY is not set, a generated key kept in
    SECRET_KEY_FILE. Idempotent; runs at start-up (Django's setup, which the web process, the
    management commands, Celery workers and beat all run before they serve or send anything)."""
    Path(settings.VAR_DIR).mkdir(parents=True, exist_ok=True)
    Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)
    transport = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    for option in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        if transport.get(option):
            Path(transport[option]).mkdir(parents=True, exist_ok=True)
    try:
        settings.SECRET_KEY  # noqa: B018  (raises while the key is empty)
    except ImproperlyConfigured:
        settings.SECRET_KEY = secret_key_ensure(Path(settings.SECRET_KEY_FILE))


def secret_key_ensure(path: Path) -> str:
    """The key stored at ``path``, generated (0600) when there is none; safe when several processes
    start at once: the key is written to a private file that is then linked into place, so everyone
    reads the one that won."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "w") as handle:
                handle.write(secrets.token_urlsafe(50))
            with contextlib.suppress(FileExistsError):  # another process won; its key is the one
                os.link(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
    return path.read_text().strip()


class SkillgateConfig(AppConfig):
    name = "app"
    verbose_name = "Skillgate"

    def ready(self) -> None:
        from app.web.roles import roles_sync  # ready(): roles import the auth models, loaded only now

        conf.check()  # a setting out of its type or range stops start-up, naming its variable
        jobs_conf.check()  # the background jobs' timings (core/jobs.py), checked the same way
        var_prepare()
        # post_migrate is sent per app with models (this one has none): hook onto auth's, which every
        # migrate and every test-database flush sends after all migrations are applied.
        post_migrate.connect(
            roles_sync, sender=apps.get_app_config("auth"), dispatch_uid="app.web.roles_sync"
        )
