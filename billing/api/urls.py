from rest_framework.routers import DefaultRouter

from billing.api import views

router = DefaultRouter()
router.register("tenants", views.TenantViewSet, basename="tenant")
router.register("memberships", views.MembershipViewSet, basename="membership")

urlpatterns = router.urls

try:  # the gateway's API endpoints (keys, prices, budgets, usage) live in their own module
    from billing.api_gateway import urlpatterns as gateway_api_urlpatterns

    urlpatterns += gateway_api_urlpatterns
except ImportError:  # pragma: no cover - only while the module does not exist yet
    pass
