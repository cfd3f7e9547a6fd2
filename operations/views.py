"""SLO pages: every SLO with its live state (and, for platform admins, the form to add one), and
the panel each route's page loads and refreshes with htmx."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View

from core.access import PlatformAdminRequiredMixin, ReadsEverythingRequiredMixin, is_platform_admin
from deployments.selectors import route_list
from engines.rehearsal import SCENARIOS
from operations import incidents, mitigations, playbooks, rehearsals, scrape, selectors, services
from operations.models import Incident, Mitigation, PlaybookMode, RehearsalRun, Slo, SloKind

FORM_FIELDS = ("route", "kind", "threshold_ms", "tpot_threshold_ms", "target", "period_days", "window_scale",
               "min_requests")  # fmt: skip
DEFAULTS = {"kind": "ttft", "target": "0.99", "period_days": "30", "window_scale": "1", "min_requests": "10"}


def _errors(exc: ValidationError) -> dict[str, str]:
    if hasattr(exc, "message_dict"):
        return {k: " ".join(v) for k, v in exc.message_dict.items()}
    return {"__all__": " ".join(exc.messages)}


def _rows(slos) -> list[dict]:
    rows = []
    for slo in slos:
        last = slo.last or {}
        rows.append({"slo": slo, "windows": last.get("windows", {}), "period": last.get("period", {}),
                     "firing": last.get("firing", [])})  # fmt: skip
    return rows


class SloListView(ReadsEverythingRequiredMixin, View):
    def get(self, request, status: int = 200, form: dict | None = None, errors: dict | None = None):
        slos = selectors.slo_list()
        if request.GET.get("format") == "json":
            return JsonResponse({"results": [_as_json(s) for s in slos]})
        return render(
            request,
            "operations/slo_list.html",
            {
                "rows": _rows(slos),
                "breaches": selectors.breaches_recent(),
                "routes": route_list(),
                "kinds": SloKind.choices,
                "can_edit": is_platform_admin(request.user),
                "form": form or DEFAULTS,
                "errors": errors or {},
            },
            status=status,
        )


def _as_json(slo: Slo) -> dict:
    return {
        "id": slo.pk,
        "route": slo.route.public_name,
        "kind": slo.kind,
        "objective": slo.objective,
        "target": float(slo.target),
        "threshold_ms": slo.threshold_ms,
        "tpot_threshold_ms": slo.tpot_threshold_ms,
        "period_days": slo.period_days,
        "window_scale": slo.window_scale,
        "state": slo.state,
        "evaluated_at": slo.evaluated_at.isoformat().replace("+00:00", "Z") if slo.evaluated_at else None,
        **{k: v for k, v in (slo.last or {}).items()},
    }


class SloCreateView(PlatformAdminRequiredMixin, View):
    def post(self, request):
        form = {k: request.POST.get(k, "") for k in FORM_FIELDS}
        route = route_list().filter(pk=form["route"]).first() if form["route"].isdigit() else None
        try:
            if route is None:
                raise ValidationError({"route": "Choose a route."})
            slo = services.slo_create(
                route=route,
                kind=form["kind"],
                target=form["target"],
                threshold_ms=form["threshold_ms"],
                tpot_threshold_ms=form["tpot_threshold_ms"],
                period_days=form["period_days"],
                window_scale=form["window_scale"],
                min_requests=form["min_requests"],
                actor=request.user,
            )
        except ValidationError as exc:
            return SloListView().get(request, status=400, form=form, errors=_errors(exc))
        messages.success(request, f"SLO added: {slo}")
        return redirect(reverse("operations:slo_list"))


class SloDeleteView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int):
        slo = get_object_or_404(Slo, pk=pk)
        services.slo_delete(slo=slo, actor=request.user)
        messages.success(request, "SLO removed.")
        return redirect(reverse("operations:slo_list"))


class RouteSloPanelView(ReadsEverythingRequiredMixin, View):
    """The fragment a route's page loads and refreshes: its SLOs, live."""

    def get(self, request, route_id: int):
        slos = selectors.slos_of_route(route_id=route_id)
        route = route_list().filter(pk=route_id).first()
        targets = [t.deployment for t in route.targets.all()] if route else []
        latest = scrape.engine_latest(deployment_ids=[d.pk for d in targets])
        engines = [{"deployment": d, **latest.get(d.pk, {})} for d in targets if d.pk in latest]
        return render(
            request,
            "operations/_route_slos.html",
            {
                "rows": _rows(slos),
                "breaches": selectors.breaches_recent(route_id=route_id, limit=5),
                "engines": engines,
                "route": route,
                "policy": mitigations.policy_for(route) if route else None,
                "can_edit": is_platform_admin(request.user),
            },  # fmt: skip
        )


class IncidentListView(ReadsEverythingRequiredMixin, View):
    def get(self, request):
        qs = selectors.incident_list(status=request.GET.get("status", ""), route=request.GET.get("route", ""))
        page = Paginator(qs, 50).get_page(request.GET.get("page"))
        if request.GET.get("format") == "json":
            return JsonResponse({"count": page.paginator.count, "results": [
                incidents.postmortem_json(i) for i in page]})  # fmt: skip
        params = request.GET.copy()
        params.pop("page", None)
        return render(request, "operations/incident_list.html", {
            "page": page, "qs": params.urlencode(), "status": request.GET.get("status", ""),
            "route": request.GET.get("route", ""), "statuses": Incident.Status.choices})  # fmt: skip


class IncidentDetailView(ReadsEverythingRequiredMixin, View):
    def get(self, request, pk: int):
        incident = get_object_or_404(Incident.objects.select_related("route"), pk=pk)
        fmt = request.GET.get("format")
        if fmt == "json":
            response = JsonResponse(incidents.postmortem_json(incident))
            response["Content-Disposition"] = f'attachment; filename="incident-{incident.pk}.json"'
            return response
        if fmt == "md":
            response = HttpResponse(
                incidents.postmortem_markdown(incident), content_type="text/markdown; charset=utf-8"
            )
            response["Content-Disposition"] = f'attachment; filename="incident-{incident.pk}.md"'
            return response
        suggestions = playbooks.suggest(incident.diagnosis or {})
        links = {"route": reverse("deployments:route_detail", args=[incident.route_id]),
                 "rollouts": reverse("deployments:rollout_list"), "deployments": reverse("deployments:list"),
                 "tenants": reverse("billing:tenant_list"), "audit": reverse("audit:event_list")}  # fmt: skip
        for s in suggestions:
            s["url"] = links.get(s["page"], "")
        policy = mitigations.policy_for(incident.route)
        return render(request, "operations/incident_detail.html", {
            "incident": incident, "entries": incident.entries.all(), "diagnosis": incident.diagnosis or {},
            "suggestions": suggestions, "mitigations": incident.mitigations.all(), "policy": policy,
            "can_act": is_platform_admin(request.user) and policy.mode != PlaybookMode.SUGGEST,
            "can_edit": is_platform_admin(request.user)})  # fmt: skip


class MitigationActionView(PlatformAdminRequiredMixin, View):
    """Approve (apply), reject, extend or revert one playbook action, from the incident page."""

    def post(self, request, pk: int, verb: str):
        m = get_object_or_404(Mitigation, pk=pk)
        try:
            if verb == "apply":
                m = services.mitigation_apply(mitigation=m, actor=request.user)
            elif verb == "reject":
                services.mitigation_reject(mitigation=m, actor=request.user)
            elif verb == "extend":
                services.mitigation_extend(mitigation=m, actor=request.user)
            elif verb == "revert":
                services.mitigation_revert(
                    mitigation=m, actor=request.user, reason=f"reverted by {request.user}"
                )
            else:
                return HttpResponse("Unknown action.", status=404)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            return redirect(reverse("operations:incident_detail", args=[m.incident_id]))
        if m.state == Mitigation.State.FAILED:
            messages.error(request, f"Could not apply: {m.outcome}")
        else:
            messages.success(request, f"{verb.capitalize()}: {m.summary}")
        return redirect(reverse("operations:incident_detail", args=[m.incident_id]))


class PlaybookPolicyView(PlatformAdminRequiredMixin, View):
    """A route's playbook: its mode, time box, hold time and the limits its actions stay within."""

    def _render(self, request, route, form, errors, status=200):
        return render(request, "operations/playbook_policy.html", {
            "route": route, "form": form, "errors": errors, "modes": PlaybookMode.choices,
            "actions": playbooks.ACTIONS.items(), "context": mitigations.route_context(route)}, status=status)  # fmt: skip

    def get(self, request, route_id: int):
        route = get_object_or_404(route_list(), pk=route_id)
        policy = mitigations.policy_for(route)
        form = {f: getattr(policy, f) for f in mitigations.POLICY_FIELDS}
        return self._render(request, route, form, {})

    def post(self, request, route_id: int):
        route = get_object_or_404(route_list(), pk=route_id)
        form = {f: request.POST.get(f, "") for f in mitigations.POLICY_FIELDS if f != "actions"}
        form["actions"] = request.POST.getlist("actions")
        try:
            services.playbook_policy_set(route=route, actor=request.user, **form)
        except ValidationError as exc:
            return self._render(request, route, form, _errors(exc), status=400)
        messages.success(request, f"Playbook of {route.public_name} saved.")
        return redirect(reverse("operations:playbook_policy", args=[route.pk]))


# --- rehearsals ------------------------------------------------------------------------------------


def _rehearsal_json(run: RehearsalRun) -> dict:
    return {"id": run.pk, "scenario": run.scenario, "mode": run.mode, "status": run.status,
            "progress": run.progress, "progress_message": run.progress_message, "error": run.error,
            "created_at": run.created_at.isoformat(), "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "route": run.route.public_name if run.route else None, "incident": run.incident_id,
            "fault_at_s": run.fault_at_s, "fault_for_s": run.fault_for_s, "virtual_s": run.virtual_s,
            "result": run.result}  # fmt: skip


class RehearsalListView(ReadsEverythingRequiredMixin, View):
    """Every rehearsal run from the console, and (for platform admins) the form that starts one."""

    def _render(self, request, form, errors, status=200):
        qs = RehearsalRun.objects.select_related("route", "created_by")
        if request.GET.get("scenario") in SCENARIOS:
            qs = qs.filter(scenario=request.GET["scenario"])
        page = Paginator(qs, 25).get_page(request.GET.get("page"))
        if request.GET.get("format") == "json":
            return JsonResponse(
                {"count": page.paginator.count, "results": [_rehearsal_json(r) for r in page]}
            )
        params = request.GET.copy()
        params.pop("page", None)
        return render(request, "operations/rehearsal_list.html", {
            "page": page, "qs": params.urlencode(), "scenarios": [(k, s.title) for k, s in SCENARIOS.items()],
            "modes": RehearsalRun.Mode.choices, "form": form, "lengths": [
                (k, f"{k}: {sum(v) // 60} min ({v[0] // 60} steady, fault {v[1]} s)") for k, v in rehearsals.LENGTHS.items()], "errors": errors, "scenario": request.GET.get("scenario", ""),
            "can_start": is_platform_admin(request.user)}, status=status)  # fmt: skip

    def get(self, request):
        return self._render(request, {"scenario": "kv_exhaustion", "mode": "auto", "length": "full"}, {})

    def post(self, request):
        if not is_platform_admin(request.user):
            return HttpResponse("Only a platform admin can start a rehearsal.", status=403)
        form = {f: request.POST.get(f, "") for f in ("scenario", "mode", "length")}
        try:
            run = rehearsals.rehearsal_start(scenario_name=form["scenario"], mode=form["mode"],
                                             length=form["length"], actor=request.user)  # fmt: skip
        except ValidationError as exc:
            return self._render(request, form, _errors(exc), status=400)
        messages.success(request, f"Rehearsal #{run.pk} queued: {SCENARIOS[run.scenario].title.lower()}.")
        return redirect(reverse("operations:rehearsal_detail", args=[run.pk]))


class RehearsalDetailView(ReadsEverythingRequiredMixin, View):
    def get(self, request, pk: int):
        run = get_object_or_404(RehearsalRun.objects.select_related("route", "incident", "created_by"), pk=pk)
        if request.GET.get("format") == "json":
            return JsonResponse(_rehearsal_json(run))
        partial = request.GET.get("part") == "progress"
        if partial and not run.is_active and request.headers.get("HX-Request"):
            response = HttpResponse(status=204)
            response["HX-Refresh"] = "true"  # it ended: the whole page shows the result
            return response
        template = (
            "operations/partials/rehearsal_progress.html" if partial else "operations/rehearsal_detail.html"
        )
        sc = SCENARIOS.get(run.scenario)
        return render(request, template, {"run": run, "scenario": sc, "r": run.result or {}})
