"""Forms for node registration. They only carry input; agents.registration holds the rules."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from agents.choices import NodeState
from agents.models import Node

MAX_IMPORT_BYTES = 2 * 1024 * 1024


def labels_as_text(labels: dict[str, str]) -> str:
    return "\n".join(f"{key}={value}" for key, value in labels.items())


class NodeForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=255)
    agent_url = forms.CharField(
        label=_("Agent URL"),
        max_length=200,
        widget=forms.TextInput(attrs={"placeholder": "http://gpu-node-01:9400"}),
    )
    # Never rendered back: an edit shows only the hint and keeps the token when left empty.
    token = forms.CharField(
        label=_("Agent token"),
        required=False,
        max_length=1024,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )
    labels = forms.CharField(
        label=_("Labels"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "rack=r1\nzone=a"}),
        help_text=_("One key=value per line (or separated by ;)."),
    )
    state = forms.ChoiceField(label=_("State"), choices=NodeState.choices, initial="offline")

    def __init__(self, *args, node: Node | None = None, **kwargs) -> None:
        if node is not None:
            kwargs.setdefault(
                "initial",
                {
                    "name": node.name,
                    "agent_url": node.agent_url,
                    "labels": labels_as_text(node.labels),
                    "state": node.state,
                },
            )
        super().__init__(*args, **kwargs)
        self.node = node
        if node is not None:
            hint = node.agent_token_hint or gettext("none")
            self.fields["token"].help_text = gettext(
                "Current token: %(hint)s. Leave empty to keep it; a new agent URL needs the "
                "token again."
            ) % {"hint": hint}


class NodeImportForm(forms.Form):
    FORMATS = [("auto", _("From the file name, else CSV")), ("csv", "CSV"), ("yaml", "YAML")]

    content = forms.CharField(
        label=_("Paste CSV or YAML"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false"}),
    )
    file = forms.FileField(label=_("Or upload a file"), required=False)
    format = forms.ChoiceField(label=_("Format"), choices=FORMATS, initial="auto")
    update = forms.BooleanField(
        label=_("Update nodes that already exist"),
        required=False,
        help_text=_(
            "A row naming a registered node changes its URL, token, labels and state instead "
            "of being refused. An empty token or state cell keeps the current value."
        ),
    )

    def __init__(self, *args, may_update: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not may_update:
            # Without change_node the box is not offered: the import only adds.
            del self.fields["update"]

    def clean(self) -> dict:
        data = super().clean()
        data.setdefault("update", False)
        upload = data.get("file")
        if upload is not None:
            if upload.size > MAX_IMPORT_BYTES:
                raise forms.ValidationError(gettext("The file is larger than 2 MiB."))
            try:
                data["text"] = upload.read().decode("utf-8-sig")
            except UnicodeDecodeError:
                raise forms.ValidationError(gettext("The file is not UTF-8 text.")) from None
            name = upload.name.lower()
        else:
            data["text"] = data.get("content") or ""
            name = ""
        if not data["text"].strip():
            raise forms.ValidationError(gettext("Paste the nodes or choose a file."))
        fmt = data.get("format") or "auto"
        if fmt == "auto":
            fmt = "yaml" if name.endswith((".yaml", ".yml")) else "csv"
        data["format"] = fmt
        return data
