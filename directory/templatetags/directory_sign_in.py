"""The login page's "Sign in with <provider>" button, when an OpenID Connect provider is
configured (OIDC_ISSUER): ``{% load directory_sign_in %}{% oidc_button %}``."""

from django import template
from django.conf import settings
from django.urls import reverse
from django.utils.http import urlencode

register = template.Library()


@register.inclusion_tag("directory/oidc_button.html", takes_context=True)
def oidc_button(context) -> dict:
    if not getattr(settings, "OIDC", None):
        return {"url": ""}
    url = reverse("directory:oidc_authenticate")
    # Where the login page was asked to go next, checked again by the view.
    following = context.get("next")
    if following:
        url = f"{url}?{urlencode({'next': following})}"
    return {"url": url, "provider": settings.OIDC_PROVIDER_NAME}
