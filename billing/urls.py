from django.urls import path

from billing.views import budgets, costs, keys, prices, tenancy, usage

app_name = "billing"

urlpatterns = [
    path("tenants/", tenancy.TenantListView.as_view(), name="tenant_list"),
    path("tenants/new/", tenancy.TenantCreateView.as_view(), name="tenant_create"),
    path("tenants/<slug:slug>/", tenancy.TenantDetailView.as_view(), name="tenant_detail"),
    path("tenants/<slug:slug>/cost/", costs.TenantCostView.as_view(), name="tenant_cost"),
    path("tenants/<slug:slug>/edit/", tenancy.TenantEditView.as_view(), name="tenant_edit"),
    path("tenants/<slug:slug>/members/", tenancy.TenantMemberAddView.as_view(), name="tenant_member_add"),
    path(
        "tenants/<slug:slug>/members/<int:pk>/role/",
        tenancy.TenantMemberRoleView.as_view(),
        name="tenant_member_role",
    ),
    path(
        "tenants/<slug:slug>/members/<int:pk>/remove/",
        tenancy.TenantMemberRemoveView.as_view(),
        name="tenant_member_remove",
    ),
    path("keys/", keys.ApiKeyListView.as_view(), name="key_list"),
    path("keys/new/", keys.ApiKeyCreateView.as_view(), name="key_create"),
    path("keys/<int:pk>/revoke/", keys.ApiKeyRevokeView.as_view(), name="key_revoke"),
    path("usage/", usage.UsageView.as_view(), name="usage"),
    path("budgets/", budgets.BudgetListView.as_view(), name="budget_list"),
    path("budgets/<slug:slug>/edit/", budgets.BudgetEditView.as_view(), name="budget_edit"),
    path("prices/", prices.PriceListView.as_view(), name="price_list"),
    path("prices/new/", prices.PriceCreateView.as_view(), name="price_create"),
    path("prices/reprice/", prices.RepriceCreateView.as_view(), name="reprice_create"),
]
