"""Benchmark pages, mounted at ``/benchmarks/``.

The namespace is ``evaluations`` (what it was before the app was cut by concept), so every
``{% url 'evaluations:…' %}`` and every bookmark keeps working.
"""

from django.urls import path

from evaluations.views import benchmarks as views
from evaluations.views.common import Moved

app_name = "evaluations"

urlpatterns = [
    path("", views.RunListView.as_view(), name="run_list"),
    path("new/", views.RunCreateView.as_view(), name="run_create"),
    # Derived prices and plans moved to /cost/ (ADR 0027): bookmarks, shared plan links and old
    # forms still work, and so do these names.
    path("prices/", Moved.as_view(pattern_name="cost:derived_prices"), name="derived_prices"),
    path(
        "prices/publish/",
        Moved.as_view(pattern_name="cost:derived_price_publish"),
        name="derived_price_publish",
    ),
    path("plans/", Moved.as_view(pattern_name="cost:plan_list"), name="plan_list"),
    path("plans/new/", Moved.as_view(pattern_name="cost:plan_create"), name="plan_create"),
    path("plans/<uuid:token>/", Moved.as_view(pattern_name="cost:plan_detail"), name="plan_detail"),
    path("compare/", views.RunCompareView.as_view(), name="run_compare"),
    path("<int:pk>/", views.RunDetailView.as_view(), name="run_detail"),
    path("<int:pk>/progress/", views.RunProgressView.as_view(), name="run_progress"),
    path("<int:pk>/cancel/", views.RunCancelView.as_view(), name="run_cancel"),
    path("<int:pk>/cross-check/", views.RunCrossCheckView.as_view(), name="run_cross_check"),
    path("<int:pk>/export.json", views.RunExportJsonView.as_view(), name="run_export_json"),
    path("<int:pk>/export.csv", views.RunExportCsvView.as_view(), name="run_export_csv"),
]
