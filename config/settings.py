"""Allot settings: one module, driven by the environment.

DATABASE_URL   sqlite:///var/allot.sqlite3 (default) or postgres://...
REDIS_URL      absent: no broker; Celery tasks run eagerly in-process
SECRET_KEY     required unless DEBUG
DEBUG          default off
ALLOWED_HOSTS  comma-separated; default localhost names
ALLOT_METRICS_TOKEN  when set, /metrics wants `Authorization: Bearer <token>` (METRICS_TOKEN also read)
EMAIL_BACKEND  default: the console (the embedded default prints password-reset mail); EMAIL_HOST etc. for SMTP
"""

import os
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.csp import content_security_policy
from config.env import database_from_url, env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("ALLOT_VAR_DIR", str(BASE_DIR / "var")))


def project_folder(name: str) -> Path:
    """`templates`, `static` or `demo`: the checkout's folder, else the copy an installed wheel carries beside
    `config` (setup.py)."""
    here = BASE_DIR / name
    return here if here.is_dir() else BASE_DIR / f"allot_{name}"


DEMO_DIR = project_folder("demo")


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set (or DEBUG=1 for a development machine)")
    SECRET_KEY = "allot-insecure-development-key"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# Pages load scripts, styles and data from this server only (config/csp.py, config/middleware.py).
CONTENT_SECURITY_POLICY = content_security_policy(project_folder("static") / "plotly" / "plotly.min.js")

# Behind a TLS-terminating proxy (production): secure cookies, HSTS, and the proxy's word on the scheme.
if env_bool("ALLOT_HTTPS", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 3600)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "axes",
    "accounts",
    "topology",
    "budgets",
    "scheduler",
    "notifications",
    "operations",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Before the session is looked up and before any view: see config/middleware.py.
    "config.middleware.InputBoundaryMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last: turns a locked-out login into the lockout answer (accounts/lockout.py).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [project_folder("templates")],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "config.context_processors.navigation",
            ],
        },
    },
]

DATABASES = {
    "default": database_from_url(
        "DATABASE_URL", env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'allot.sqlite3'}"), BASE_DIR
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # Tests use a file too (one per test run), so the live server and worker processes share it.
    DATABASES["default"]["TEST"] = {
        "NAME": str(Path(DATABASES["default"]["NAME"]).with_name(f"test-allot-{os.getpid()}.sqlite3"))
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# django-axes first: it refuses a login for an account or address past the failure limit, before any password check.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env_int("ALLOT_LOGIN_FAILURE_LIMIT", 5)
# Per account and, separately, per client address.
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_COOLOFF_TIME = timedelta(minutes=env_int("ALLOT_LOGIN_LOCKOUT_MINUTES", 15))
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "accounts.lockout.lockout_response"
AXES_VERBOSE = False

# User API tokens: one per login, valid this many days unless revoked (accounts/).
ALLOT_TOKEN_DAYS = env_int("ALLOT_TOKEN_DAYS", 30)

# Password reset mail: the console unless a backend is configured (SMTP: EMAIL_HOST, EMAIL_PORT, ...).
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "allot@localhost")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("ALLOT_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
# Everything the pages load is served from here: pages work with no internet. Plotly is its cartesian bundle
# (static/plotly/README.md): every chart is a scatter or bar.
STATICFILES_DIRS = [project_folder("static")]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed names and compressed copies once `collectstatic` ran (config/static.py); plain names before.
    "staticfiles": {"BACKEND": "config.static.StaticStorage"},
}
# Serve straight from the app folders in development and tests: no collectstatic needed.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["accounts.throttles.UserThrottle", "accounts.throttles.AddressThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "user": env_str("ALLOT_THROTTLE_USER", "1200/min"),
        "ip": env_str("ALLOT_THROTTLE_IP", "3000/min"),
        "login": env_str("ALLOT_THROTTLE_LOGIN", "30/min"),
        "what_if_user": env_str("ALLOT_THROTTLE_WHAT_IF_USER", "30/hour"),
        "what_if_request": env_str("ALLOT_THROTTLE_WHAT_IF_REQUEST", "10/hour"),
    },
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "config.parsers.BoundaryJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "config.pagination.Pagination",
    "PAGE_SIZE": 200,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Allot API",
    "DESCRIPTION": "GPU-time budgets, fair-share scheduling and cluster operations.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Several models have a `state`: name each choice set after its model.
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "scheduler.choices.JobState",
        "HostStateEnum": "topology.choices.HostState",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.openapi.add_error_responses",
    ],
}

# Celery: with REDIS_URL, a real broker; without it, tasks run in-process and
# their errors propagate to the caller (the embedded default and the tests).
REDIS_URL = env_str("REDIS_URL")
# Throttle counts: shared through Redis when there is one, else kept per process.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL} if REDIS_URL
          else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = REDIS_URL or None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
# Beat sends only while it holds the beat lock (config/celery.py): run a standby beat on a second machine.
CELERY_BEAT_SCHEDULER = "config.celery:LeaderBeat"
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Two queues, so a busy what-if never delays a tick: `ticks` (the tick and the grants' expiry: short, one
# worker process), `simulations` (what-ifs and reports: long). A worker started without -Q takes both, and
# `celery`, where a task nobody routed lands.
CELERY_TASK_QUEUES = {"ticks": {}, "simulations": {}, "celery": {}}
CELERY_TASK_ROUTES = {
    "scheduler.tick": {"queue": "ticks"},
    "budgets.tasks.expire_allocations": {"queue": "ticks"},
    "budgets.tasks.run_what_if": {"queue": "simulations"},
    # Deliveries wait on other people's mail servers and webhooks: never on the ticks' queue.
    "notifications.deliver": {"queue": "simulations"},
}
# A worker takes one message at a time: a long simulation holds no tick, nor other simulations, behind it.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Seconds; soft raises inside the task (a what-if records it as its failure), hard kills the worker process.
ALLOT_TICK_TIME_LIMIT = env_int("ALLOT_TICK_TIME_LIMIT", 60)
ALLOT_WHAT_IF_TIME_LIMIT = env_int("ALLOT_WHAT_IF_TIME_LIMIT", 600)
CELERY_TASK_ANNOTATIONS = {
    # A tick is never retried: the next one, ALLOT_TICK_SECONDS later, supersedes it.
    "scheduler.tick": {"soft_time_limit": ALLOT_TICK_TIME_LIMIT, "time_limit": ALLOT_TICK_TIME_LIMIT + 30},
    "budgets.tasks.expire_allocations": {"soft_time_limit": 60, "time_limit": 90},
    # Acknowledged when done, so a worker that dies or is stopped before the simulation claims its what-if
    # leaves the message for another worker.
    "budgets.tasks.run_what_if": {
        "acks_late": True, "reject_on_worker_lost": True,
        "soft_time_limit": ALLOT_WHAT_IF_TIME_LIMIT, "time_limit": ALLOT_WHAT_IF_TIME_LIMIT + 60,
    },
}
CELERY_RESULT_EXPIRES = 3600

# How often the scheduler loop ticks when no cluster says otherwise (seconds).
ALLOT_TICK_SECONDS = env_int("ALLOT_TICK_SECONDS", 5)
CELERY_BEAT_SCHEDULE = {
    # A tick that waited longer than one interval is dropped (it expires): the next one supersedes it.
    "scheduler-tick": {
        "task": "scheduler.tick", "schedule": float(ALLOT_TICK_SECONDS), "options": {"expires": ALLOT_TICK_SECONDS},
    },
    # The tick expires grants too; this catches them when no cluster is loaded yet.
    "expire-allocations": {
        "task": "budgets.tasks.expire_allocations", "schedule": 60.0, "options": {"expires": 60},
    },
    # Notifications due (new ones and retries), on the workers, never inside a tick.
    "notifications-deliver": {"task": "notifications.deliver", "schedule": 15.0, "options": {"expires": 15}},
}
# Links in notifications (e-mail, webhooks) start with this.
ALLOT_BASE_URL = env_str("ALLOT_BASE_URL", "http://127.0.0.1:8000")
# Simulated executor: how many seconds of a job's work pass in one real second. 1 (the default) keeps one clock:
# work, protection, estimated starts, drains and the what-if all run in real time. The fault tests raise it.
ALLOT_SIMULATION_SPEED = env_int("ALLOT_SIMULATION_SPEED", 1)
# The dashboards' history: the tick keeps one sample of each cluster this often (seconds).
ALLOT_SAMPLE_SECONDS = env_int("ALLOT_SAMPLE_SECONDS", 60)
# /metrics: when set, scrapers must send `Authorization: Bearer <token>`; empty: open (the usual for Prometheus).
METRICS_TOKEN = env_str("ALLOT_METRICS_TOKEN", "") or env_str("METRICS_TOKEN", "")

# ALLOT_LOG_FORMAT=json: one JSON object a line, with tick, cluster, job and host as fields (config/logs.py).
LOG_FORMAT = env_str("ALLOT_LOG_FORMAT", "plain")
if LOG_FORMAT not in {"plain", "json"}:
    raise ImproperlyConfigured(f"ALLOT_LOG_FORMAT must be plain or json, not {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "config.logs.ContextFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "config.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["context"]}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}
# Celery's worker and beat log through the handler above (JSON too), not a handler of their own.
CELERY_WORKER_HIJACK_ROOT_LOGGER = LOG_FORMAT != "json"
