from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from telemetry import card_claims
from telemetry.models import CardClaim


@admin.register(CardClaim)
class CardClaimAdmin(admin.ModelAdmin):
    """Cards reported by a second node: the admin decides where each one is."""

    list_display = ["uuid", "held_by", "node", "since"]
    list_select_related = ["gpu__node", "node"]
    readonly_fields = ["gpu", "node", "since"]
    actions = ["move_to_reporting_node"]

    @admin.display(description=_("UUID"), ordering="gpu__uuid")
    def uuid(self, claim: CardClaim) -> str:
        return claim.gpu.uuid

    @admin.display(description=_("recorded on"))
    def held_by(self, claim: CardClaim):
        return claim.gpu.node

    def has_add_permission(self, request) -> bool:
        return False  # only the poll cycle records claims

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_move_permission(self, request) -> bool:
        return request.user.has_perm("agents.change_gpu")

    @admin.action(
        description=_("Move the card to the node that reports it"),
        permissions=["move"],
    )
    def move_to_reporting_node(self, request, queryset) -> None:
        moved = card_claims.move_to_reporting_node(queryset.values_list("pk", flat=True))
        self.message_user(
            request,
            ngettext("%(count)d card moved.", "%(count)d cards moved.", moved) % {"count": moved},
            messages.SUCCESS,
        )
