# One image for the web server, the Celery worker and beat, and the simulated agents.
FROM node:20-bookworm-slim AS frontend
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PORTAL_VAR_DIR=/var/lib/gpu-portal
WORKDIR /app

COPY pyproject.toml README.md ./
COPY portal ./portal
COPY agents ./agents
COPY telemetry ./telemetry
COPY pools ./pools
COPY quotas ./quotas
COPY alerts ./alerts
COPY audit ./audit
COPY reports ./reports
COPY tokens ./tokens
COPY directory ./directory
COPY clusters ./clusters
COPY gpuctl ./gpuctl
COPY templates ./templates
COPY static ./static
COPY locale ./locale
COPY manage.py ./
COPY --from=frontend /app/node_modules ./node_modules
# --build-arg WITH_LDAP=1: with the company-directory sign-in (the ldap extra); python-ldap
# is built against Debian's LDAP and SASL headers and keeps their runtime libraries. The
# OpenID Connect sign-in (the oidc extra, wheels only) is always in: OIDC_ISSUER turns it on.
ARG WITH_LDAP=0
RUN if [ "$WITH_LDAP" = 1 ]; then \
        apt-get update -qq \
        && apt-get install -y -qq --no-install-recommends build-essential libldap2-dev \
           libsasl2-dev \
        && pip install --no-cache-dir -e ".[ldap,oidc]" \
        && apt-get purge -y build-essential && apt-get autoremove -y \
        && rm -rf /var/lib/apt/lists/*; \
    else pip install --no-cache-dir -e ".[oidc]"; fi \
    && useradd --system --uid 10001 --user-group --home /var/lib/gpu-portal --create-home portal
# Numeric, so that Kubernetes' runAsNonRoot can check it (deploy/helm: runAsUser 10001).
USER 10001

EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "portal.asgi:application"]
