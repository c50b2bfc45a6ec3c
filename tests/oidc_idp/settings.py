"""A minimal identity provider for the OpenID Connect tests: django-oauth-toolkit's OpenID
Connect provider in a Django process of its own (tests/oidc_provider.py starts it), with
a SQLite database and an RSA key in a temporary folder. Not the product: nothing of the
portal is installed here.

The environment says where: IDP_FOLDER (database, key, state file) and IDP_ISSUER.
"""

import os
from pathlib import Path

FOLDER = Path(os.environ["IDP_FOLDER"])
ISSUER = os.environ["IDP_ISSUER"]

SECRET_KEY = "idp-test-only-key"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.oidc_idp.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).parent / "templates"],
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": FOLDER / "idp.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
# Its own cookie name: the portal and this provider both run on 127.0.0.1.
SESSION_COOKIE_NAME = "idp_session"
CSRF_COOKIE_NAME = "idp_csrf"
LOGIN_URL = "/accounts/login/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_ISS_ENDPOINT": ISSUER,
    "OIDC_RSA_PRIVATE_KEY": (FOLDER / "rsa.pem").read_text(),
    "PKCE_REQUIRED": True,
    "SCOPES": {
        "openid": "OpenID Connect",
        "profile": "Name and department",
        "email": "E-mail",
        "groups": "Group memberships",
    },
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_idp.validator.Validator",
    "OIDC_RP_INITIATED_LOGOUT_ENABLED": True,
    "OIDC_RP_INITIATED_LOGOUT_ALWAYS_PROMPT": False,
    "ACCESS_TOKEN_EXPIRE_SECONDS": 300,
}
