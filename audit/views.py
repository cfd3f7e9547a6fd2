"""The audit page (admins and auditors): filtered, paginated trail, chain status, streamed exports."""

from __future__ import annotations

from django.contrib.auth.mixins import AccessMixin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views import View

from audit import exports
from audit.checkpoints import export_cut
from audit.forms import EventFilterForm
from audit.head import published_head
from audit.permissions import can_read_audit
from audit.selectors import chain_status, events_filtered, signing_public_key
from audit.services import audit_verify_record

PAGE_SIZE = 50


class AuditReaderRequiredMixin(AccessMixin):
    """Anonymous → login page; signed in without the right to read the trail → 403."""

    def dispatch(self, request, *args, **kwargs):
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        if not can_read_audit(request.user):
            raise PermissionDenied("Only platform admins and auditors may read the audit trail.")
        return super().dispatch(request, *args, **kwargs)


def _querystring_without_page(request) -> str:
    params = request.GET.copy()
    params.pop("page", None)
    return params.urlencode()


class EventListView(AuditReaderRequiredMixin, View):
    def get(self, request):
        form = EventFilterForm(request.GET or None)
        if form.is_bound and not form.is_valid():
            events = events_filtered().none()
            status = 400
        else:
            events = events_filtered(**(form.selector_kwargs() if form.is_bound else {}))
            status = 200
        page = Paginator(events.order_by("-seq"), PAGE_SIZE).get_page(request.GET.get("page"))
        context = {
            "form": form,
            "page": page,
            "qs": _querystring_without_page(request),
            "status": chain_status(),
            "signing": signing_public_key(),
        }
        return render(request, "audit/event_list.html", context, status=status)


class ChainVerifyView(AuditReaderRequiredMixin, View):
    """Seal what is pending and walk the whole chain (htmx partial; a full page without htmx)."""

    def get(self, request):
        result = audit_verify_record()
        published = published_head()
        template = "audit/partials/verify_result.html" if request.htmx else "audit/verify_page.html"
        return render(request, template, {"result": result, "published": published})


class ExportView(AuditReaderRequiredMixin, View):
    kind = "json"

    def get(self, request):
        form = EventFilterForm(request.GET or None)
        if form.is_bound and not form.is_valid():
            problems = "; ".join(
                (f"{name}: " if name != "__all__" else "") + error["message"]
                for name, errors in form.errors.get_json_data().items()
                for error in errors
            )
            return HttpResponse(
                f"Bad filters: {problems}\n", status=400, content_type="text/plain; charset=utf-8"
            )
        filters = form.active_filters() if form.is_bound else {}
        events = events_filtered(**(form.selector_kwargs() if form.is_bound else {}))
        checkpoint, keys = export_cut()
        if self.kind == "csv":
            chunks, content_type = (
                exports.csv_chunks(events, checkpoint=checkpoint, keys=keys, filters=filters),
                "text/csv",
            )
        else:
            chunks = exports.json_chunks(events, checkpoint=checkpoint, keys=keys, filters=filters)
            content_type = "application/json"
        size = checkpoint["size"] if checkpoint else 0
        response = StreamingHttpResponse(chunks, content_type=f"{content_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="audit-{size - 1}.{self.kind}"'
        if checkpoint:
            response["X-Audit-Head"] = f"{size - 1}:{checkpoint['head']}"
        return response
