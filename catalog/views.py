"""Catalog pages: lists with filters and pagination, detail pages, and htmx create/edit forms."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View
from django_htmx.http import HttpResponseClientRedirect

from catalog import selectors, services
from catalog.forms import (
    EstimateForm,
    GpuCostVersionForm,
    GpuTypeForm,
    KvCalculatorForm,
    LifecycleForm,
    ModelForm,
    ModelVersionForm,
    VersionFilterForm,
)
from catalog.models import GpuType, Model, ModelVersion
from catalog.promotion import version_promotion
from core.access import PlatformAdminRequiredMixin, PlatformUserRequiredMixin

PAGE_SIZE = 25


def _page(request, queryset):
    return Paginator(queryset, PAGE_SIZE).get_page(request.GET.get("page"))


def _querystring_without_page(request) -> str:
    params = request.GET.copy()
    params.pop("page", None)
    return params.urlencode()


class VersionListView(PlatformUserRequiredMixin, View):
    """All model versions; filters by family, precision, framework and lifecycle."""

    def get(self, request):
        form = VersionFilterForm(request.GET or None, families=selectors.model_families())
        filters = form.cleaned_data if form.is_valid() else {}
        versions = selectors.model_version_list(
            search=filters.get("q") or None,
            family=filters.get("family") or None,
            precision=filters.get("precision") or None,
            framework=filters.get("framework") or None,
            lifecycle=filters.get("lifecycle") or None,
        )
        context = {"form": form, "page": _page(request, versions), "qs": _querystring_without_page(request)}
        template = "catalog/partials/version_table.html" if request.htmx else "catalog/modelversion_list.html"
        return render(request, template, context)


class VersionDetailView(PlatformUserRequiredMixin, View):
    """A version with its memory estimate on every GPU type."""

    def get(self, request, pk: int):
        version = get_object_or_404(
            ModelVersion.objects.select_related("model", "baseline", "created_by", "gate_override_by"), pk=pk
        )
        form = EstimateForm(request.GET or None)
        params = form.cleaned_data if form.is_valid() else {}
        estimates = services.model_version_memory_estimates(
            version=version,
            gpu_types=list(selectors.gpu_type_list()),
            context_len=params.get("context_len") or None,
            gpu_memory_utilization=params.get("gpu_memory_utilization") or 0.9,
        )
        promotion = version_promotion(version=version)
        context = {
            "version": version,
            "spec": version.to_spec(),
            "estimates": estimates,
            "estimate_form": form,
            "promotion": promotion,
            "moves": selectors.version_moves(version=version, promotion=promotion),
        }
        template = (
            "catalog/partials/estimate_table.html" if request.htmx else "catalog/modelversion_detail.html"
        )
        return render(request, template, context)


class VersionTransitionView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int):
        version = get_object_or_404(ModelVersion, pk=pk)
        form = LifecycleForm(request.POST)
        if form.is_valid():
            try:
                services.model_version_transition(
                    version=version,
                    to=form.cleaned_data["to"],
                    actor=request.user,
                    reason=form.cleaned_data["reason"],
                    override=form.cleaned_data["override"],
                )
                messages.success(request, f"{version} is now {version.get_lifecycle_display().lower()}.")
            except ValidationError as exc:
                messages.error(request, " ".join(exc.messages))
        else:
            messages.error(request, "Unknown lifecycle state.")
        return redirect(version.get_absolute_url())


class _FormView(PlatformAdminRequiredMixin, View):
    """Create/edit with one template for full page and htmx partial; success → HX-Redirect."""

    form_class = None
    model = None
    title = ""

    def get_object(self, pk):
        return get_object_or_404(self.model, pk=pk) if pk else None

    def render_form(self, request, form, obj, status=200):
        context = {"form": form, "object": obj, "title": self.title if obj is None else f"Edit {obj}"}
        template = "catalog/partials/form.html" if request.htmx else "catalog/form_page.html"
        return render(request, template, context, status=status)

    def get(self, request, pk: int | None = None):
        obj = self.get_object(pk)
        return self.render_form(request, self.form_class(instance=obj), obj)

    def post(self, request, pk: int | None = None):
        obj = self.get_object(pk)
        form = self.form_class(request.POST, instance=obj)
        if not form.is_valid():
            return self.render_form(request, form, obj, status=422 if request.htmx else 200)
        try:
            saved = self.save(form, request)
        except ValidationError as exc:
            form.add_error(None, exc)
            return self.render_form(request, form, obj, status=422 if request.htmx else 200)
        messages.success(request, f"Saved {saved}.")
        if request.htmx:
            return HttpResponseClientRedirect(saved.get_absolute_url())
        return redirect(saved.get_absolute_url())

    save_service = None

    def save(self, form, request):
        # The ModelForm validated and filled form.instance; the service writes it and audits it.
        return type(self).save_service(instance=form.instance, actor=request.user)


class VersionCreateView(_FormView):
    form_class = ModelVersionForm
    model = ModelVersion
    title = "New model version"

    save_service = services.model_version_save


class ModelFormView(_FormView):
    form_class = ModelForm
    model = Model
    title = "New model"
    save_service = services.model_save


class GpuTypeFormView(_FormView):
    form_class = GpuTypeForm
    model = GpuType
    title = "New GPU type"
    save_service = services.gpu_type_save


class ModelListView(PlatformUserRequiredMixin, View):
    def get(self, request):
        family = request.GET.get("family") or None
        models_qs = selectors.model_list(family=family, search=request.GET.get("q") or None)
        context = {
            "page": _page(request, models_qs),
            "families": selectors.model_families(),
            "family": family,
            "q": request.GET.get("q", ""),
            "qs": _querystring_without_page(request),
        }
        return render(request, "catalog/model_list.html", context)


class ModelDetailView(PlatformUserRequiredMixin, View):
    def get(self, request, pk: int):
        model = get_object_or_404(Model, pk=pk)
        versions = model.versions.select_related("baseline").order_by("label")
        return render(request, "catalog/model_detail.html", {"model": model, "versions": versions})


class GpuTypeListView(PlatformUserRequiredMixin, View):
    def get(self, request):
        gpus = [(g, services.gpu_hourly_cost(g)) for g in selectors.gpu_type_list()]
        return render(request, "catalog/gputype_list.html", {"gpus": gpus})


class GpuTypeDetailView(PlatformUserRequiredMixin, View):
    def get(self, request, pk: int, form=None, status=200):
        gpu = get_object_or_404(GpuType, pk=pk)
        context = {
            "gpu": gpu,
            "hourly": services.gpu_hourly_cost(gpu),
            "in_force": selectors.gpu_cost_in_force(gpu_type_id=gpu.pk),
            "cost_versions": selectors.gpu_cost_versions(gpu_type_id=gpu.pk),
            "cost_form": form or GpuCostVersionForm(),
        }
        return render(request, "catalog/gputype_detail.html", context, status=status)


class GpuCostVersionCreateView(PlatformAdminRequiredMixin, View):
    """Add a GPU hourly cost version (platform admins); bad input answers 400 naming the field."""

    def post(self, request, pk: int):
        gpu = get_object_or_404(GpuType, pk=pk)
        form = GpuCostVersionForm(request.POST)
        if form.is_valid():
            d = dict(form.cleaned_data)
            inputs = {k: d.pop(k) for k in services.GPU_COST_INPUTS}
            inputs = {k: v for k, v in inputs.items() if v is not None}
            try:
                services.gpu_cost_version_create(
                    gpu_type=gpu, basis=d["basis"], pool=d["pool"] or "", target_utilization=d["target_utilization"],
                    effective_from=d["effective_from"], note=d["note"], actor=request.user, **inputs,
                )  # fmt: skip
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, errors)
            else:
                messages.success(request, f"New hourly cost for {gpu.name} saved.")
                return redirect(reverse("catalog:gpu_detail", args=[gpu.pk]))
        return GpuTypeDetailView().get(request, pk, form=form, status=400)


def catalog_home(request):
    return redirect(reverse("catalog:version_list"))


class KvCalculatorView(PlatformUserRequiredMixin, View):
    """KV/memory what-if: context length × concurrency × KV dtype on a GPU type at a TP size."""

    def get(self, request):
        form = KvCalculatorForm(
            request.GET or None, versions=selectors.model_version_list(), gpus=selectors.gpu_type_list()
        )
        result = None
        if form.is_bound and form.is_valid():
            d = form.cleaned_data
            try:
                result = services.kv_memory_whatif(
                    version=d["version"], gpu_type=d["gpu_type"], tensor_parallel=d["tensor_parallel"],
                    context_len=d["context_len"], concurrency=d["concurrency"], kv_cache_dtype=d["kv_cache_dtype"],
                    gpu_memory_utilization=d.get("gpu_memory_utilization") or 0.9,
                    max_num_batched_tokens=d.get("max_num_batched_tokens"),
                )  # fmt: skip
            except ValidationError as exc:
                form.add_error(None, exc)
        status = 400 if form.is_bound and not form.is_valid() else 200
        return render(request, "catalog/kv_calculator.html", {"form": form, "result": result}, status=status)
