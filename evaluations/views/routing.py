"""Router policy pages (mounted under ``/gates/routers/``): the list, training, and a policy's curve,
operating point, gate and activation. Platform admins and auditors read; admins change."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from core.access import PlatformAdminRequiredMixin, ReadsEverythingRequiredMixin
from evaluations.forms.routing import RouterActivateForm, RouterTrainForm
from evaluations.models import RouterPolicy
from evaluations.selectors import routing as selectors
from evaluations.services import routing as services


class RouterListView(ReadsEverythingRequiredMixin, View):
    def get(self, request):
        return render(
            request, "evaluations/routerpolicy_list.html", {"policies": selectors.router_policy_list()[:200]}
        )


class RouterTrainView(PlatformAdminRequiredMixin, View):
    def get(self, request):
        return render(request, "evaluations/routerpolicy_form.html", {"form": RouterTrainForm()})

    def post(self, request):
        form = RouterTrainForm(request.POST)
        if form.is_valid():
            try:
                policy = services.router_policy_train(actor=request.user, **form.service_kwargs())
            except ValidationError as exc:
                form.add_service_errors(exc.message_dict)
            else:
                messages.success(request, f"Trained {policy}.")
                return redirect(policy.get_absolute_url())
        return render(request, "evaluations/routerpolicy_form.html", {"form": form}, status=400)


def _chart(policy: RouterPolicy) -> dict:
    test = policy.summary.get("test") or {}
    return {
        "curve": [{"x": p["cost_ratio"], "y": p["quality_ratio"], "lo": p["ratio_lo"], "hi": p["ratio_hi"],
                   "t": p["threshold"]} for p in policy.curve],
        "point": {"x": test.get("cost_ratio"), "y": test.get("quality_ratio")},
        "target": policy.quality_target,
    }  # fmt: skip


class RouterDetailView(ReadsEverythingRequiredMixin, View):
    def _render(self, request, policy, form=None, status=200):
        context = {
            "policy": policy,
            "chart": _chart(policy),
            "form": form or RouterActivateForm(),
            "test": policy.summary.get("test") or {},
            "validation": policy.summary.get("validation") or {},
        }
        return render(request, "evaluations/routerpolicy_detail.html", context, status=status)

    def get(self, request, pk: int):
        return self._render(request, get_object_or_404(selectors.router_policy_list(), pk=pk))


class RouterActionView(PlatformAdminRequiredMixin, View):
    """POST ``action`` = gate, activate or retire."""

    def post(self, request, pk: int, action: str):
        policy = get_object_or_404(selectors.router_policy_list(), pk=pk)
        form = RouterActivateForm(request.POST)
        form.is_valid()
        try:
            if action == "gate":
                services.router_policy_judge(policy=policy, actor=request.user)
            elif action == "activate":
                services.router_policy_activate(
                    policy=policy,
                    actor=request.user,
                    override_reason=form.cleaned_data.get("override_reason", ""),
                )
            elif action == "retire":
                services.router_policy_retire(policy=policy, actor=request.user)
            else:
                return redirect(policy.get_absolute_url())
        except ValidationError as exc:
            for name, msgs in exc.message_dict.items():
                form.add_error(name if name in form.fields else None, msgs)
            return RouterDetailView()._render(request, policy, form, status=400)
        messages.success(request, f"{policy}: {action} done.")
        return redirect(policy.get_absolute_url())
