"""Benchmark pages, mounted at ``/benchmarks/``.

The namespace is ``evaluations`` (what it was before the app was cut by concept), so every
``{% url 'evaluations:…' %}`` and every bookmark keeps working.
"""

from django.urls import path

from evaluations.views import benchmarks as views
from evaluations.views import cost as cost_views

app_name = "evaluations"

urlpatterns = [
    path("", views.RunListView.as_view(), name="run_list"),
    path("new/", views.RunCreateView.as_view(), name="run_create"),
    path("prices/", cost_views.DerivedPriceListView.as_view(), name="derived_prices"),
    path("prices/publish/", cost_views.DerivedPricePublishView.as_view(), name="derived_price_publish"),
    path("plans/", cost_views.CapacityPlanListView.as_view(), name="plan_list"),
    path("plans/new/", cost_views.CapacityPlanCreateView.as_view(), name="plan_create"),
    path("plans/<uuid:token>/", cost_views.CapacityPlanDetailView.as_view(), name="plan_detail"),
    path("compare/", views.RunCompareView.as_view(), name="run_compare"),
    path("<int:pk>/", views.RunDetailView.as_view(), name="run_detail"),
    path("<int:pk>/progress/", views.RunProgressView.as_view(), name="run_progress"),
    path("<int:pk>/cancel/", views.RunCancelView.as_view(), name="run_cancel"),
    path("<int:pk>/cross-check/", views.RunCrossCheckView.as_view(), name="run_cross_check"),
    path("<int:pk>/export.json", views.RunExportJsonView.as_view(), name="run_export_json"),
    path("<int:pk>/export.csv", views.RunExportCsvView.as_view(), name="run_export_csv"),
]
