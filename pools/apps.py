from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PoolsConfig(AppConfig):
    # Pools, vGPU slices and placement arrive with the pooling issue.
    name = "pools"
    verbose_name = _("Pools")
