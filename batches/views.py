"""Tenant pages for batches: the list, one batch's progress (polled with htmx while it runs), its
files to download and a cancel button; and the platform admin's review of batch prices."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views import View

from batches.forms import BatchFilterForm
from batches.selectors import batches_visible_to, file_of_tenant
from batches.services.batches import batch_cancel
from batches.services.pricing import batch_price_derivation, batch_price_publish
from core.access import (
    PlatformAdminRequiredMixin,
    PlatformUserRequiredMixin,
    can_manage_tenant_keys,
    reads_everything,
    refuse_hidden_write,
    refuse_write,
    tenant_ids,
)
from deployments.selectors import routing_table

PAGE_SIZE = 50


def _visible(request):
    u = request.user
    return batches_visible_to(reads_everything=reads_everything(u), tenant_ids=tenant_ids(u))


def _batch_or_404(request, batch_id: str):
    b = _visible(request).filter(pk=batch_id).first()
    if b is None:
        raise Http404("no such batch")
    return b


class BatchListView(PlatformUserRequiredMixin, View):
    def get(self, request):
        form = BatchFilterForm(request.GET or None)
        qs = _visible(request)
        if form.is_valid():
            if form.cleaned_data["status"]:
                qs = qs.filter(status=form.cleaned_data["status"])
            if form.cleaned_data["model"]:
                qs = qs.filter(model=form.cleaned_data["model"])
        page = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
        params = request.GET.copy()
        params.pop("page", None)
        template = "batches/partials/batch_table.html" if request.htmx else "batches/batch_list.html"
        return render(request, template, {"page": page, "form": form, "qs": params.urlencode()})


class BatchDetailView(PlatformUserRequiredMixin, View):
    def get(self, request, batch_id: str):
        b = _batch_or_404(request, batch_id)
        ctx = {"batch": b, "can_cancel": can_manage_tenant_keys(request.user, b.tenant_id)}
        template = "batches/partials/batch_progress.html" if request.htmx else "batches/batch_detail.html"
        return render(request, template, ctx)


class BatchCancelView(PlatformUserRequiredMixin, View):
    def post(self, request, batch_id: str):
        b = _visible(request).filter(pk=batch_id).first()
        if b is None:
            refuse_hidden_write(request, target_type="batches.batch", target_id=batch_id, tenant_id=None,
                                reason="cancel of a batch the user cannot see")  # fmt: skip
            raise Http404("no such batch")
        if not can_manage_tenant_keys(request.user, b.tenant_id):
            refuse_write(request, reason="cancelling a batch needs the tenant's admin")
            return HttpResponse("Only the tenant's admins may cancel its batches.", status=403)
        batch_cancel(batch=b, actor=request.user)
        messages.info(request, f"Batch {b.pk} is being cancelled; lines already answered stay in its output.")
        return redirect("batches:detail", batch_id=b.pk)


class BatchFileView(PlatformUserRequiredMixin, View):
    """An input, output or error file of a batch the user may read."""

    def get(self, request, batch_id: str, which: str):
        b = _batch_or_404(request, batch_id)
        file_id = {"input": b.input_file_id, "output": b.output_file_id, "error": b.error_file_id}.get(which)
        f = file_of_tenant(tenant_id=b.tenant_id, file_id=file_id) if file_id else None
        if f is None:
            raise Http404("no such file")
        resp = HttpResponse(bytes(f.content), content_type="application/jsonl")
        resp["Content-Disposition"] = f'attachment; filename="{f.filename}"'
        return resp


class BatchPriceView(PlatformAdminRequiredMixin, View):
    """Review each served model's batch price with its inputs, and publish it."""

    def get(self, request):
        rows = [batch_price_derivation(public_model=name) for name in sorted(routing_table())]
        return render(request, "batches/batch_prices.html", {"rows": rows})

    def post(self, request):
        try:
            batch_price_publish(
                public_model=request.POST.get("public_model", ""),
                fingerprint=request.POST.get("fingerprint", ""),
                actor=request.user,
            )
        except ValidationError as exc:
            messages.error(request, "; ".join(exc.messages))
            return redirect("batches:prices")
        messages.success(request, "Batch price published; the gateways bill batch lines at it from now on.")
        return redirect("batches:prices")
