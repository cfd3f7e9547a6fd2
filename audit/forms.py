"""Query parameters of the audit page, its exports and the API filters."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.utils import timezone


class EventFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=150)
    action = forms.CharField(
        required=False,
        max_length=64,
        help_text="any part of the action, case-insensitive: model_version finds model_version.gate_override",
    )
    object_type = forms.CharField(
        required=False, max_length=64, help_text="app_label.model, e.g. catalog.modelversion"
    )
    object_id = forms.CharField(required=False, max_length=64)
    tenant = forms.IntegerField(required=False, min_value=1, label="Tenant id")
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(
        required=False, label="To (inclusive)", widget=forms.DateInput(attrs={"type": "date"})
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            field.widget.attrs.setdefault("class", "form-control form-control-sm")
            field.widget.attrs.setdefault("placeholder", field.label or "")
        # Shown in the input itself, so the page documents the match without a template change.
        self.fields["action"].widget.attrs.update(
            placeholder="part of an action, e.g. model_version", title=self.fields["action"].help_text
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("since") and data.get("until") and data["since"] > data["until"]:
            raise forms.ValidationError("'From' must be on or before 'To'.")
        return data

    def selector_kwargs(self) -> dict[str, Any]:
        """The cleaned filters as ``audit.selectors.events_filtered`` keywords."""
        data = self.cleaned_data
        tz = timezone.get_current_timezone()
        since = dt.datetime.combine(data["since"], dt.time.min, tzinfo=tz) if data.get("since") else None
        until = (
            dt.datetime.combine(data["until"] + dt.timedelta(days=1), dt.time.min, tzinfo=tz)
            if data.get("until")
            else None
        )
        return {
            "actor": data.get("actor") or "",
            "action": data.get("action") or "",
            "object_type": data.get("object_type") or "",
            "object_id": data.get("object_id") or "",
            "tenant_id": data.get("tenant"),
            "since": since,
            "until": until,
        }

    def active_filters(self) -> dict[str, str]:
        """The filters that were set, as strings (printed into exports)."""
        return {name: str(value) for name, value in self.cleaned_data.items() if value not in (None, "")}
