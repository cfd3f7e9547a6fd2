"""Form helpers every app's pages share."""

from __future__ import annotations

from django import forms


class BootstrapMixin:
    """Adds Bootstrap classes so every form renders consistently."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            css = "form-select" if isinstance(field.widget, forms.Select) else "form-control"
            if isinstance(field.widget, forms.CheckboxInput):
                css = "form-check-input"
            field.widget.attrs.setdefault("class", css)
