"""Price versions per public model."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views import View
from django_htmx.http import HttpResponseClientRedirect

from billing.forms import PriceForm, RepriceForm
from billing.selectors.prices import price_get, price_list, prices_in_force, reprice_list
from billing.services.prices import price_set, reprice_record
from billing.views.common import PAGE_SIZE
from core.access import (
    PlatformAdminRequiredMixin,
    PlatformUserRequiredMixin,
    is_platform_admin,
    reads_everything,
)


def _context(request, *, form=None, reprice_form=None, page_number=None) -> dict:
    admin = is_platform_admin(request.user)
    return {
        "page": Paginator(price_list(), PAGE_SIZE).get_page(page_number),
        "in_force": {
            p.pk for kind in ("online", "batch", "cache") for p in prices_in_force(kind=kind).values()
        },
        "form": form or (PriceForm() if admin else None),
        "reprice_form": reprice_form or (RepriceForm() if admin else None),
        "reprices": reprice_list()[:50] if reads_everything(request.user) else [],
        "reads_everything": reads_everything(request.user),
        "qs": "",
    }


class PriceListView(PlatformUserRequiredMixin, View):
    """Price versions per public model; the one in force is marked."""

    def get(self, request):
        return render(
            request, "billing/price_list.html", _context(request, page_number=request.GET.get("page"))
        )


class PriceCreateView(PlatformAdminRequiredMixin, View):
    def post(self, request):
        form = PriceForm(request.POST)
        if not form.is_valid():
            return render(request, "billing/price_list.html", _context(request, form=form), status=400)
        d = form.cleaned_data
        try:
            price_set(
                public_model=d["public_model"],
                input_per_million=d["input_per_million"],
                output_per_million=d["output_per_million"],
                effective_from=d.get("effective_from"),
                note=d.get("note", ""),
                kind=d.get("kind") or "online",
                actor=request.user,
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
            return render(request, "billing/price_list.html", _context(request, form=form), status=400)
        messages.success(request, f"New price for {d['public_model']} saved.")
        url = reverse("billing:price_list")
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


class RepriceCreateView(PlatformAdminRequiredMixin, View):
    """Record a re-price of a past period (audited); the usage events are left as billed."""

    def post(self, request):
        form = RepriceForm(request.POST)
        if form.is_valid():
            d = form.cleaned_data
            price = price_get(pk=d["price_id"])
            if price is None:
                form.add_error("price_id", "No such price version.")
            else:
                try:
                    rp = reprice_record(
                        public_model=d["public_model"], period_start=d["period_start"], period_end=d["period_end"],
                        price=price, reason=d["reason"], actor=request.user,
                    )  # fmt: skip
                except ValidationError as exc:
                    for field, errors in exc.message_dict.items():
                        form.add_error(field if field in form.fields else None, errors)
                else:
                    messages.success(request, f"Re-price recorded: difference {rp.delta_nanos} nano-dollars.")
                    return redirect(reverse("billing:price_list"))
        return render(request, "billing/price_list.html", _context(request, reprice_form=form), status=400)
