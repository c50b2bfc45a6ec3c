"""Run the test identity provider: ``python -m tests.oidc_idp.serve PORT``, with IDP_FOLDER
and IDP_ISSUER set (tests/oidc_provider.py). Makes its database, its users (``IDP_USERS``:
name:password,...) and the portal's client (``IDP_CLIENT``: a JSON object), then serves on
127.0.0.1:PORT with a threaded WSGI server until terminated."""

import json
import os
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Quiet(WSGIRequestHandler):
    def log_message(self, format, *args):
        sys.stderr.write("idp: " + format % args + "\n")


def main() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_idp.settings"
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.core.wsgi import get_wsgi_application
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    for pair in os.environ.get("IDP_USERS", "").split(","):
        if pair:
            name, password = pair.split(":", 1)
            User.objects.create_user(name, password=password)
    client = json.loads(os.environ["IDP_CLIENT"])
    Application.objects.create(
        name="GPU Portal", client_id=client["client_id"], client_secret=client["client_secret"],
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(client["redirect_uris"]),
        post_logout_redirect_uris=" ".join(client["post_logout_redirect_uris"]),
        algorithm=Application.RS256_ALGORITHM, skip_authorization=True,
    )  # fmt: skip
    server = make_server("127.0.0.1", int(sys.argv[1]), get_wsgi_application(),
                         server_class=Server, handler_class=Quiet)  # fmt: skip
    print("idp ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
