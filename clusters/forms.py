from django import forms
from django.utils.translation import gettext_lazy as _

from clusters.models import Cluster, NamespaceMapping


class ClusterForm(forms.ModelForm):
    api_url = forms.URLField(label=_("API URL"), max_length=500, assume_scheme="https")
    # Write-only: a password input that never renders the value back.
    token = forms.CharField(
        label=_("Service-account token"), widget=forms.PasswordInput(render_value=False),
        help_text=_("Stored encrypted; it is not shown again after saving."),
    )  # fmt: skip

    class Meta:
        model = Cluster
        fields = ["name", "api_url", "ca_bundle", "enforcement", "kueue", "pool"]


class NamespaceForm(forms.ModelForm):
    class Meta:
        model = NamespaceMapping
        fields = ["namespace", "tenant"]


class ClusterEditForm(forms.ModelForm):
    """A change of a cluster: the token only when a new one is typed; the pool stays."""

    api_url = forms.URLField(label=_("API URL"), max_length=500, assume_scheme="https")
    token = forms.CharField(
        label=_("New service-account token"), required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text=_("Leave blank to keep the current token."),
    )  # fmt: skip

    class Meta:
        model = Cluster
        fields = ["name", "api_url", "ca_bundle", "enforcement", "kueue"]
