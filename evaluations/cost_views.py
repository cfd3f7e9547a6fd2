"""Cost pages of the evaluations app: derived prices (review and publish)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views import View

from evaluations.pricing import derived_price_publish, price_derivation, price_derivations
from governor.access import PlatformAdminRequiredMixin, ReadsEverythingRequiredMixin, is_platform_admin


class DerivedPriceListView(ReadsEverythingRequiredMixin, View):
    """For each public model: the price derived from goodput, its inputs, and the price in force."""

    def get(self, request):
        return render(
            request,
            "evaluations/derived_prices.html",
            {"derivations": price_derivations(), "can_publish": is_platform_admin(request.user)},
        )


class DerivedPricePublishView(PlatformAdminRequiredMixin, View):
    """Publish the reviewed derivation as a new price version (audited); 400 naming the problem."""

    def post(self, request):
        public_model = request.POST.get("public_model", "")
        try:
            price = derived_price_publish(
                public_model=public_model,
                fingerprint=request.POST.get("fingerprint", ""),
                note=request.POST.get("note", "")[:200],
                actor=request.user,
            )
        except ValidationError as exc:
            errors = [f"{m}" for msgs in exc.message_dict.values() for m in msgs]
            context = {
                "derivations": [price_derivation(public_model=public_model)] if public_model else [],
                "can_publish": True,
                "errors": errors,
            }
            return render(request, "evaluations/derived_prices.html", context, status=400)
        messages.success(
            request,
            f"Published {public_model}: ${price.input_per_million} in / ${price.output_per_million} out per M tokens.",
        )
        return redirect(reverse("evaluations:derived_prices"))
