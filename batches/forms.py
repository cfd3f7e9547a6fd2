from __future__ import annotations

from django import forms

from batches import constants as c


class BatchFilterForm(forms.Form):
    """The batch list's query parameters."""

    status = forms.ChoiceField(choices=[("", "any status"), *[(s, s) for s in c.STATUSES]], required=False)
    model = forms.CharField(required=False, max_length=200)
