from django.urls import include, path

from billing import views

app_name = "billing"

urlpatterns = [
    path("tenants/", views.TenantListView.as_view(), name="tenant_list"),
    path("tenants/<slug:slug>/", views.TenantDetailView.as_view(), name="tenant_detail"),
]

try:  # the gateway's console pages (keys, usage, budgets, prices) live in their own module
    from billing.urls_gateway import urlpatterns as gateway_urlpatterns

    urlpatterns += gateway_urlpatterns
except ImportError:  # pragma: no cover - only while the module does not exist yet
    pass

__all__ = ["urlpatterns", "include"]
