"""The API schema's word for the Bearer token: an HTTP bearer scheme (loaded in
``TokensConfig.ready``; drf-spectacular finds extensions by subclassing)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "tokens.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token (gpp_...) from the Account page or /api/v1/tokens/.",
        }
