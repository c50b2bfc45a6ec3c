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
COPY templates ./templates
COPY static ./static
COPY locale ./locale
COPY manage.py ./
COPY --from=frontend /app/node_modules ./node_modules
RUN pip install --no-cache-dir -e . \
    && useradd --system --home /var/lib/gpu-portal --create-home portal
USER portal

EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "portal.asgi:application"]
