"""Forms of the gateway's console pages: keys, prices, budgets and limits, usage filters."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.utils import timezone

from billing.models import Budget, Tenant, UsageEvent
from billing.models.keys import CLASS_CHOICES
from billing.selectors.prices import public_model_exists
from billing.services.budgets import PERCENT_MAX
from billing.services.prices import PRICE_MAX_PER_MILLION


class _Bootstrap:
    """Bootstrap classes on every widget, so templates can render fields plainly."""

    def _style(self) -> None:
        for field in self.fields.values():
            css = (
                "form-select form-select-sm"
                if isinstance(field.widget, forms.Select)
                else "form-control form-control-sm"
            )
            field.widget.attrs.setdefault("class", css)


def _split_names(value: str) -> list[str]:
    return sorted({v.strip() for v in (value or "").replace("\n", ",").split(",") if v.strip()})


class ApiKeyCreateForm(_Bootstrap, forms.Form):
    """A new key for one of the tenants the user manages."""

    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none())
    name = forms.CharField(max_length=100)
    expires_at = forms.DateTimeField(
        required=False,
        help_text="Optional, UTC, e.g. 2027-01-31 00:00",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    allowed_models = forms.CharField(
        required=False, help_text="Public model names, comma-separated; empty = every model."
    )
    rpm_limit = forms.IntegerField(min_value=0, initial=0, help_text="Requests/min for this key; 0 = none.")
    tpm_limit = forms.IntegerField(min_value=0, initial=0, help_text="Tokens/min for this key; 0 = none.")
    traffic_class = forms.ChoiceField(
        choices=[("", "The tenant's"), *CLASS_CHOICES],
        required=False,
        help_text="The highest class its requests may ask for, and their default; never above the tenant's.",
    )

    def __init__(self, *args, tenants, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants
        # The picker offers no past minute; the server still checks (clocks and old pages differ).
        self.fields["expires_at"].widget.attrs["min"] = timezone.now().strftime("%Y-%m-%dT%H:%M")
        self._style()

    def clean_expires_at(self):
        value = self.cleaned_data.get("expires_at")
        if value is not None and value <= timezone.now():
            raise forms.ValidationError("The expiry must be in the future (UTC).")
        return value

    def clean_allowed_models(self) -> list[str]:
        return _split_names(self.cleaned_data.get("allowed_models", ""))


class PriceForm(_Bootstrap, forms.Form):
    """A new price version for a public model (one a route answers to; from now on, never backdated)."""

    public_model = forms.CharField(max_length=200, help_text="A route's public model name.")
    kind = forms.ChoiceField(
        choices=[("online", "Online requests"), ("batch", "Batch lines"), ("cache", "Semantic cache hits")],
        initial="online",
        required=False,
        help_text="Cache hits: what an answer from the route's semantic cache is billed at.",
    )
    input_per_million = forms.DecimalField(
        min_value=Decimal("0"),
        max_value=PRICE_MAX_PER_MILLION,
        max_digits=12,
        decimal_places=3,
        label="Input $ / M tokens",
    )
    output_per_million = forms.DecimalField(
        min_value=Decimal("0"),
        max_value=PRICE_MAX_PER_MILLION,
        max_digits=12,
        decimal_places=3,
        label="Output $ / M tokens",
    )
    effective_from = forms.DateTimeField(
        required=False, help_text="UTC; empty = now. Not in the past: use Re-price for that."
    )
    note = forms.CharField(max_length=200, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._style()

    def clean_public_model(self) -> str:
        name = self.cleaned_data["public_model"].strip()
        if not public_model_exists(public_model=name):
            raise forms.ValidationError(f"No route answers to {name!r}; create the route first.")
        return name


class BudgetForm(_Bootstrap, forms.Form):
    """A tenant's budget and its gateway limits, edited together on one page."""

    amount_usd = forms.DecimalField(
        min_value=Decimal("0"), max_digits=18, decimal_places=6, label="Amount (USD)"
    )
    period = forms.ChoiceField(choices=Budget.Period.choices, initial=Budget.Period.MONTHLY)
    soft_threshold_percents = forms.CharField(
        required=False, initial="50,80,100", help_text="Percentages that notify, comma-separated."
    )
    hard_cap_percent = forms.IntegerField(
        min_value=1,
        max_value=PERCENT_MAX,
        required=False,
        initial=100,
        help_text="Reject beyond this % of the amount; empty = no hard cap.",
    )
    rpm_limit = forms.IntegerField(min_value=0, initial=0, label="Tenant requests/min")
    tpm_limit = forms.IntegerField(min_value=0, initial=0, label="Tenant tokens/min")
    max_input_tokens = forms.IntegerField(min_value=0, initial=0, label="Max prompt tokens")
    max_output_tokens = forms.IntegerField(min_value=0, initial=0, label="Max max_tokens")
    vote_samples_per_month = forms.IntegerField(
        min_value=0,
        initial=0,
        required=False,
        label="Voting samples/month",
        help_text="Samples voting requests may spend a calendar month; 0 = no limit (docs/voting.md).",
    )
    traffic_class = forms.ChoiceField(
        choices=CLASS_CHOICES,
        initial="standard",
        required=False,
        label="Highest traffic class",
        help_text="Under saturation sheddable requests are refused first, then standard; interactive last.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._style()

    def clean_soft_threshold_percents(self) -> list[int]:
        raw = self.cleaned_data.get("soft_threshold_percents") or ""
        try:
            values = sorted({int(v) for v in _split_names(raw)})
        except ValueError as exc:
            raise forms.ValidationError("Use whole percentages, e.g. 50,80,100.") from exc
        if any(v <= 0 or v > PERCENT_MAX for v in values):
            raise forms.ValidationError(f"Percentages go from 1 to {PERCENT_MAX}.")
        return values


class UsageFilterForm(_Bootstrap, forms.Form):
    """Query parameters of the usage page and its CSV export."""

    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), required=False)
    model = forms.CharField(required=False, max_length=200)
    status = forms.ChoiceField(choices=[("", "any status"), *UsageEvent.Status.choices], required=False)
    traffic_class = forms.ChoiceField(
        choices=[("", "any class"), *CLASS_CHOICES], required=False, label="Class"
    )
    since = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    until = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))

    def __init__(self, *args, tenants, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants
        self._style()


class CostRangeForm(_Bootstrap, forms.Form):
    """Query parameters of a tenant's cost page and its exports: a date range (UTC) and a bucket."""

    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(
        required=False, help_text="Exclusive.", widget=forms.DateInput(attrs={"type": "date"})
    )
    bucket = forms.ChoiceField(
        choices=[("day", "Daily"), ("week", "Weekly"), ("month", "Monthly")], required=False, initial="day"
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._style()

    def clean(self):
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and until <= since:
            raise forms.ValidationError("The end date must be after the start date.")
        return data


class RepriceForm(_Bootstrap, forms.Form):
    """Re-price a past period of one model at another price version (recorded, never applied to events)."""

    public_model = forms.CharField(max_length=200)
    price_id = forms.IntegerField(min_value=1, label="Price version #")
    period_start = forms.DateTimeField(help_text="UTC")
    period_end = forms.DateTimeField(help_text="UTC, exclusive")
    reason = forms.CharField(max_length=500)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._style()

    def clean(self):
        data = super().clean()
        if data.get("period_start") and data.get("period_end") and data["period_end"] <= data["period_start"]:
            raise forms.ValidationError("The period must end after it starts.")
        return data


class TenantForm(_Bootstrap, forms.Form):
    """Create or edit a tenant (platform admins)."""

    name = forms.CharField(max_length=128)
    slug = forms.SlugField(max_length=64, required=False, help_text="In URLs; defaults to the name")
    is_active = forms.BooleanField(
        required=False, initial=True, help_text="Inactive: members lose access, the gateway refuses its keys"
    )


class MembershipAddForm(_Bootstrap, forms.Form):
    """Add a user to a tenant, by username."""

    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=[("member", "Member"), ("admin", "Tenant admin")], initial="member")


class MembershipRoleForm(_Bootstrap, forms.Form):
    role = forms.ChoiceField(choices=[("member", "Member"), ("admin", "Tenant admin")])
