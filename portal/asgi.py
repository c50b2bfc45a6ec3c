"""ASGI entry point: HTTP through Django, websockets through Channels."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# Django must be set up before the routing modules import models.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

from alerts.routing import websocket_urlpatterns as alerts_websockets  # noqa: E402
from pools.routing import websocket_urlpatterns as pools_websockets  # noqa: E402
from portal.websocket import (  # noqa: E402
    NotFoundConsumer,
    SameOriginValidator,
    SyncWorkPerSocket,
)
from quotas.requests.routing import websocket_urlpatterns as requests_ws  # noqa: E402
from telemetry.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SameOriginValidator(
            SyncWorkPerSocket(
                AuthMiddlewareStack(
                    # Unknown paths end at NotFoundConsumer: closed, instead of URLRouter's error.
                    URLRouter(
                        [
                            *websocket_urlpatterns,
                            *pools_websockets,
                            *requests_ws,
                            *alerts_websockets,
                            re_path(r"", NotFoundConsumer.as_asgi()),
                        ]
                    )
                )
            )
        ),
    }
)
