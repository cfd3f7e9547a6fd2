from django.urls import path
from rest_framework.routers import DefaultRouter

from billing.api import views

router = DefaultRouter()
router.register("tenants", views.TenantViewSet, basename="tenant")
router.register("memberships", views.MembershipViewSet, basename="membership")

urlpatterns = [
    *router.urls,
    path("keys/", views.ApiKeyListCreate.as_view(), name="api-key-list"),
    path("keys/<int:pk>/revoke/", views.ApiKeyRevoke.as_view(), name="api-key-revoke"),
    path("prices/", views.PriceListCreate.as_view(), name="api-price-list"),
    path("budgets/", views.BudgetList.as_view(), name="api-budget-list"),
    path("budgets/<slug:slug>/", views.BudgetDetail.as_view(), name="api-budget-detail"),
    path("limits/<slug:slug>/", views.LimitsDetail.as_view(), name="api-limits-detail"),
    path("usage/", views.UsageList.as_view(), name="api-usage-list"),
]
