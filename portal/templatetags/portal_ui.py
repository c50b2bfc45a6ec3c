"""Template helpers for the UI kit (Tabler on Bootstrap 5): icons, form widgets, list shells."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from django import forms, template
from django.contrib.staticfiles import finders
from django.template.base import FilterExpression, NodeList, Parser, Token, token_kwargs
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import pgettext

register = template.Library()


@register.filter
def gib(mib: int | float | None) -> str:
    """MiB as GiB with one decimal; a dash when unknown."""
    if mib is None:
        return "\u2013"  # an en dash, as the live pages show
    return f"{mib / 1024:.1f}"


ICON_NAME = re.compile(r"[a-z0-9-]+")
SVG_BODY = re.compile(r"<svg[^>]*>(.*)</svg>", re.DOTALL)


@functools.cache
def _icon_paths(name: str) -> str:
    """The drawing inside one of Tabler's outline icon files ('' when it is not installed)."""
    path = finders.find(f"vendor/tabler-icons/{name}.svg") if ICON_NAME.fullmatch(name) else None
    if not path:
        return ""
    found = SVG_BODY.search(Path(path).read_text(encoding="utf-8"))
    return found.group(1).strip() if found else ""


@register.simple_tag
def icon(name: str, extra: str = "") -> SafeString:
    """One of Tabler's outline icons, drawn inline in the text colour.

    Inline SVG rather than a CSS mask with a per-icon style attribute: the content security
    policy allows no inline style, and Tabler's ``.icon`` class is made for inline SVG.
    """
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" class="icon pi {}" viewBox="0 0 24 24" '
        'fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" '
        'stroke-linejoin="round" aria-hidden="true" focusable="false">{}</svg>',
        extra,
        mark_safe(_icon_paths(name)),  # noqa: S308 (the kit's own SVG files, read from disk)
    )


_SEPARATORS = {
    # After a label ("Online: 5"); Chinese writes a full-width colon (U+FF1A).
    "colon": lambda: pgettext("separator after a label", ": "),
    # Between items of a list ("5 nodes, 40 GPUs"); Chinese a full-width comma (U+FF0C).
    "comma": lambda: pgettext("separator between list items", ", "),
}


@register.simple_tag
def sep(kind: str) -> str:
    """Punctuation in the reader's language, where a template puts words together."""
    return _SEPARATORS[kind]()


@register.filter
def kit_widget(field: forms.BoundField) -> SafeString:
    """The field's widget with the kit's class, marked invalid when the field has errors."""
    widget = field.field.widget
    if isinstance(widget, forms.RadioSelect | forms.CheckboxSelectMultiple):
        return _choice_list(field)
    if isinstance(widget, forms.CheckboxInput):
        css = "form-check-input"
    elif isinstance(widget, forms.Select):
        css = "form-select"
    else:
        css = "form-control"
    if field.errors:
        css += " is-invalid"
    return field.as_widget(attrs={"class": css})


def _choice_list(field: forms.BoundField) -> SafeString:
    """Radio buttons and checkbox lists as the kit's checks: a visible control beside each
    label. With the text boxes' ``form-control`` they drew as empty boxes (appearance:
    none), and nobody could see which option was chosen."""
    css = "form-check-input" + (" is-invalid" if field.errors else "")
    items = []
    for option in field.subwidgets:
        option.data["attrs"] = {**option.data["attrs"], "class": css}
        items.append(format_html(
            '<label class="form-check form-check-inline">{}'
            '<span class="form-check-label">{}</span></label>',
            option.tag(), option.choice_label,
        ))  # fmt: skip
    role = "radiogroup" if isinstance(field.field.widget, forms.RadioSelect) else "group"
    return format_html(
        '<div class="form-choices" role="{}" aria-labelledby="{}-label">{}</div>',
        role, field.auto_id, format_html_join("", "{}", ((item,) for item in items)),
    )  # fmt: skip


@register.filter
def is_choice_list(field: forms.BoundField) -> bool:
    return isinstance(field.field.widget, forms.RadioSelect | forms.CheckboxSelectMultiple)


@register.filter
def is_checkbox(field: forms.BoundField) -> bool:
    return isinstance(field.field.widget, forms.CheckboxInput)


# The list pages' shells: a table in the kit's markup, or what shows when it has no rows.
# Block tags rather than includes, because the rows (and an empty state's actions) are the
# page's own markup; the shells themselves are templates in portal/.


class TableNode(template.Node):
    def __init__(
        self,
        rows: FilterExpression,
        css: FilterExpression | None,
        options: dict[str, FilterExpression],
        nodelists: dict[str, NodeList],
    ) -> None:
        self.rows, self.css, self.options, self.nodelists = rows, css, options, nodelists

    def render(self, context: template.Context) -> str:
        options = {name: value.resolve(context) for name, value in self.options.items()}
        parts = self.nodelists
        if not self.rows.resolve(context):
            if "empty" in parts:
                return parts["empty"].render(context)
            note = options.get("empty")
            return (
                format_html('<div class="card-body text-secondary">{}</div>', note) if note else ""
            )
        shell = context.template.engine.get_template("portal/_table.html")
        return shell.render(
            context.new(
                {
                    "css": self.css.resolve(context) if self.css else "",
                    "id": options.get("id", ""),
                    "card": options.get("card", False),
                    "body": parts["table"].render(context),
                    "footer": parts["footer"].render(context) if "footer" in parts else "",
                }
            )
        )


@register.tag
def table(parser: Parser, token: Token) -> TableNode:
    """``{% table rows "css" card=True id="x" empty=_("note") %}`` thead and tbody
    ``{% footer %}`` inside the card, after the table ``{% empty %}`` instead of it
    ``{% endtable %}``.

    With rows: the table (in a card of its own with card=True). Without: the ``empty`` part,
    else the ``empty`` note as a card body (for a table inside a card), else nothing.
    """
    bits = token.split_contents()
    if len(bits) < 2:
        raise template.TemplateSyntaxError("table takes the rows, then an optional class")
    rows = parser.compile_filter(bits[1])
    rest = bits[2:]
    css = parser.compile_filter(rest.pop(0)) if rest and "=" not in rest[0] else None
    options = token_kwargs(rest, parser)
    if rest or not set(options) <= {"card", "id", "empty"}:
        raise template.TemplateSyntaxError("table takes card=, id= and empty= only")
    nodelists: dict[str, NodeList] = {}
    part = "table"
    while True:
        nodelists[part] = parser.parse(("footer", "empty", "endtable"))
        part = parser.next_token().contents
        if part == "endtable":
            return TableNode(rows, css, options, nodelists)
        if part in nodelists:
            raise template.TemplateSyntaxError(f"table has one {{% {part} %}} at most")


class EmptyStateNode(template.Node):
    def __init__(self, options: dict[str, FilterExpression], actions: NodeList) -> None:
        self.options, self.actions = options, actions

    def render(self, context: template.Context) -> str:
        shell = context.template.engine.get_template("portal/_empty_state.html")
        values = {"icon": "", "subtitle": "", "card": True}
        values.update((name, value.resolve(context)) for name, value in self.options.items())
        values["actions"] = self.actions.render(context)
        return shell.render(context.new(values))


@register.tag
def empty_state(parser: Parser, token: Token) -> EmptyStateNode:
    """``{% empty_state title=_("…") icon="…" subtitle=_("…") card=False %}`` actions
    ``{% endempty_state %}``: the kit's empty state (a card of its own unless card=False)."""
    rest = token.split_contents()[1:]
    options = token_kwargs(rest, parser)
    if rest or "title" not in options or not set(options) <= {"title", "icon", "subtitle", "card"}:
        raise template.TemplateSyntaxError("empty_state takes title= and icon=, subtitle=, card=")
    actions = parser.parse(("endempty_state",))
    parser.delete_first_token()
    return EmptyStateNode(options, actions)
