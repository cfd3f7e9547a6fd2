"""Console URLs of the gateway's billing pages (included by ``billing.urls``, namespace ``billing``)."""

from django.urls import path

from billing import views_gateway as v

urlpatterns = [
    path("keys/", v.ApiKeyListView.as_view(), name="key_list"),
    path("keys/new/", v.ApiKeyCreateView.as_view(), name="key_create"),
    path("keys/<int:pk>/revoke/", v.ApiKeyRevokeView.as_view(), name="key_revoke"),
    path("usage/", v.UsageView.as_view(), name="usage"),
    path("budgets/", v.BudgetListView.as_view(), name="budget_list"),
    path("budgets/<slug:slug>/edit/", v.BudgetEditView.as_view(), name="budget_edit"),
    path("prices/", v.PriceListView.as_view(), name="price_list"),
    path("prices/new/", v.PriceCreateView.as_view(), name="price_create"),
]
