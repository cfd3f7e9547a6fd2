"""Forms of the eval-suite and eval-run pages: suite upload, the run form, the case filters."""

from __future__ import annotations

from django import forms

from evaluations.forms.common import small_bootstrap


class SuiteUploadForm(forms.Form):
    name = forms.CharField(max_length=128, help_text="An existing name adds a new version of that suite.")
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    file = forms.FileField(label="JSONL file", help_text="One case per line (see the format below).")
    note = forms.CharField(required=False, max_length=255, help_text="What changed in this version")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        small_bootstrap(self)


class EvalRunForm(forms.Form):
    """Run a suite version against a live deployment (its OpenAI URL through Ray Serve)."""

    deployment = forms.ModelChoiceField(queryset=None, empty_label=None)
    concurrency = forms.IntegerField(min_value=1, max_value=64, initial=16)
    seed = forms.IntegerField(
        initial=1234, help_text="Same seed + temperature 0: the same requests every time"
    )

    def __init__(self, *args, **kwargs):
        from deployments.selectors import deployment_list

        super().__init__(*args, **kwargs)
        self.fields["deployment"].queryset = deployment_list()
        small_bootstrap(self)


class CaseFilterForm(forms.Form):
    category = forms.ChoiceField(required=False)
    failed = forms.BooleanField(required=False, label="only cases that lost points")
    q = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"placeholder": "id or output contains"})
    )

    def __init__(self, *args, categories: list[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["category"].choices = [("", "every category")] + [(c, c) for c in categories]
        small_bootstrap(self)
