"""Cost pages (mounted at ``/cost/``): derived prices (review and publish) and the capacity planner."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views import View
from django_htmx.http import HttpResponseClientRefresh

from core.access import (
    PlatformAdminRequiredMixin,
    PlatformUserRequiredMixin,
    ReadsEverythingRequiredMixin,
    is_platform_admin,
    reads_everything,
)
from deployments.selectors import deployment_get
from evaluations.forms.cost import CapacityPlanForm
from evaluations.selectors.autoscaling import autoscaling_suggestion, observed_replicas
from evaluations.selectors.planner import capacity_plan_get, capacity_plan_list
from evaluations.services.planner import capacity_plan_create
from evaluations.services.pricing import derived_price_publish, price_derivation, price_derivations


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
        return redirect(reverse("cost:derived_prices"))


class CapacityPlanListView(PlatformUserRequiredMixin, View):
    """Saved plans (admins and auditors see the list; anyone with a plan's link may open it) and the form."""

    def get(self, request, form=None, status=200):
        plans = capacity_plan_list()[:50] if reads_everything(request.user) else []
        form = form or (CapacityPlanForm() if is_platform_admin(request.user) else None)
        return render(
            request, "evaluations/capacity_plan_list.html", {"plans": plans, "form": form}, status=status
        )


class CapacityPlanCreateView(PlatformAdminRequiredMixin, View):
    def post(self, request):
        form = CapacityPlanForm(request.POST)
        if form.is_valid():
            d = form.cleaned_data
            try:
                plan = capacity_plan_create(
                    name=d["name"],
                    inputs={
                        k: d.get(k)
                        for k in (
                            "peak_qps",
                            "input_mean",
                            "input_sigma",
                            "output_mean",
                            "output_sigma",
                            "ttft_ms",
                            "tpot_ms",
                            "redundancy",
                        )
                    },  # fmt: skip
                    candidates=form.candidates(),
                    actor=request.user,
                )
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, errors)
            else:
                return redirect(reverse("cost:plan_detail", args=[plan.token]))
        return CapacityPlanListView().get(request, form=form, status=400)


class CapacityPlanDetailView(PlatformUserRequiredMixin, View):
    def get(self, request, token):
        plan = capacity_plan_get(token=token)
        if plan is None:
            raise Http404("No such plan.")
        if request.GET.get("part") == "progress":
            if not plan.is_active and request.htmx:
                return HttpResponseClientRefresh()  # done: reload the page with the table and chart
            return render(request, "evaluations/partials/plan_progress.html", {"plan": plan})
        ok = [r for r in plan.rows if r.get("ok")]
        chart = {
            "labels": [r["candidate"] for r in ok],
            "monthly_usd": [round(r["monthly_usd"], 2) for r in ok],
            "gpus": [r["gpus"] for r in ok],
            "labels_kind": [r["label"] for r in ok],
        }
        # What deployments ran is the platform's to see (admins, auditors), not a tenant member's.
        show_observed = plan.status == "done" and reads_everything(request.user)
        observed = observed_replicas(rows=plan.rows) if show_observed else {}
        return render(
            request,
            "evaluations/capacity_plan_detail.html",
            {"plan": plan, "chart": chart, "observed": observed},
        )


class AutoscalingSuggestionView(PlatformAdminRequiredMixin, View):
    """The autoscaling settings derived from a deployment's measured capacity and the capacity plans,
    each with its source, and a form that applies them through the deployment's scale action (a
    partial the deployment page loads with htmx)."""

    def get(self, request, pk: int):
        try:
            deployment = deployment_get(pk=pk)
        except ObjectDoesNotExist:
            raise Http404("No such deployment.") from None
        suggestion = autoscaling_suggestion(deployment=deployment)
        return render(
            request,
            "evaluations/partials/autoscaling_suggestion.html",
            {"deployment": deployment, "suggestion": suggestion},
        )
