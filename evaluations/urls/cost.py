"""Cost pages, mounted at ``/cost/``: prices derived from goodput, the capacity planner, and what
the GPUs behind deployments cost (billed and idle)."""

from django.urls import path

from evaluations.views import cost, gpu_costs

app_name = "cost"

urlpatterns = [
    path("prices/", cost.DerivedPriceListView.as_view(), name="derived_prices"),
    path("prices/publish/", cost.DerivedPricePublishView.as_view(), name="derived_price_publish"),
    path("plans/", cost.CapacityPlanListView.as_view(), name="plan_list"),
    path("plans/new/", cost.CapacityPlanCreateView.as_view(), name="plan_create"),
    path("plans/<uuid:token>/", cost.CapacityPlanDetailView.as_view(), name="plan_detail"),
    path(
        "plans/deployments/<int:pk>/autoscaling/",
        cost.AutoscalingSuggestionView.as_view(),
        name="autoscaling_suggestion",
    ),
    path("gpus/", gpu_costs.GpuCostView.as_view(), name="gpu_costs"),
]
