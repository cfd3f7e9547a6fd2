"""Price versions per public model."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views import View
from django_htmx.http import HttpResponseClientRedirect

from billing.forms import PriceForm
from billing.selectors.prices import price_list, prices_in_force
from billing.services.prices import price_set
from billing.views.common import PAGE_SIZE
from governor.access import (
    PlatformAdminRequiredMixin,
    PlatformUserRequiredMixin,
    is_platform_admin,
)


class PriceListView(PlatformUserRequiredMixin, View):
    """Price versions per public model; the one in force is marked."""

    def get(self, request):
        in_force = {p.pk for p in prices_in_force().values()}
        page = Paginator(price_list(), PAGE_SIZE).get_page(request.GET.get("page"))
        form = PriceForm() if is_platform_admin(request.user) else None
        return render(
            request, "billing/price_list.html", {"page": page, "in_force": in_force, "form": form, "qs": ""}
        )


class PriceCreateView(PlatformAdminRequiredMixin, View):
    def post(self, request):
        form = PriceForm(request.POST)
        if not form.is_valid():
            in_force = {p.pk for p in prices_in_force().values()}
            page = Paginator(price_list(), PAGE_SIZE).get_page(1)
            return render(
                request,
                "billing/price_list.html",
                {"page": page, "in_force": in_force, "form": form, "qs": ""},
                status=400,
            )
        d = form.cleaned_data
        price_set(
            public_model=d["public_model"],
            input_per_million=d["input_per_million"],
            output_per_million=d["output_per_million"],
            effective_from=d.get("effective_from"),
            note=d.get("note", ""),
            actor=request.user,
        )
        messages.success(request, f"New price for {d['public_model']} saved.")
        url = reverse("billing:price_list")
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
