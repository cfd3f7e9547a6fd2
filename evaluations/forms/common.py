"""Helpers the evaluations forms share."""

from __future__ import annotations

from django import forms


def small_bootstrap(form: forms.Form) -> None:
    """Bootstrap classes on every widget (forms stay plain Django)."""
    for field in form.fields.values():
        w = field.widget
        if isinstance(w, forms.CheckboxInput):
            w.attrs.setdefault("class", "form-check-input")
        elif isinstance(w, forms.Select):
            w.attrs.setdefault("class", "form-select form-select-sm")
        else:
            w.attrs.setdefault("class", "form-control form-control-sm")
