"""Settings, all from the environment through typed helpers (core/env.py).

Every knob is declared here, once, with its default and a comment; the code reads ``settings.X``
(or ``settings.SKILLGATE[...]``) and never the environment. With nothing set, the service runs on an
embedded default: SQLite in the project folder and a file-based Celery transport under var/, so a
newcomer needs no server at all. Importing this module writes no file: the folders under var/ and a
generated secret key are made at start-up (``app.apps.SkillgateConfig.ready``).

The settings are split by concern; this package imports every part, in order (a later part may read and
extend what an earlier one declared: ``SKILLGATE``, ``CELERY_BEAT_SCHEDULE``, ``INSTALLED_APPS``).
"""

from app.settings.base import *  # noqa: F403
from app.settings.gateway import *  # noqa: F403
from app.settings.learning import *  # noqa: F403
from app.settings.observability import *  # noqa: F403
from app.settings.operations import *  # noqa: F403
from app.settings.security import *  # noqa: F403
