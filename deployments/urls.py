from django.urls import path
from django.views.generic import RedirectView

from deployments import views
from deployments.rollouts import views as rollout_views
from deployments.semcache import views as cache_views

app_name = "deployments"

urlpatterns = [
    path("", views.DeploymentListView.as_view(), name="list"),
    path("new/", views.DeploymentCreateView.as_view(), name="create"),
    # The GPU cost page moved to the cost pages (/cost/gpus/, ADR 0027); bookmarks and this name still work.
    path(
        "costs/",
        RedirectView.as_view(pattern_name="cost:gpu_costs", permanent=True, query_string=True),
        name="gpu_costs",
    ),
    path("serve-config/", views.ServeConfigView.as_view(), name="serve_config"),
    path("reconcile/", views.ReconcileNowView.as_view(), name="reconcile"),
    path("<int:pk>/", views.DeploymentDetailView.as_view(), name="detail"),
    path("<int:pk>/scale/", views.DeploymentScaleView.as_view(), name="scale"),
    path("<int:pk>/admission/", views.DeploymentAdmissionView.as_view(), name="admission"),
    path("<int:pk>/stop/", views.DeploymentStopView.as_view(), name="stop"),
    path("<int:pk>/start/", views.DeploymentStartView.as_view(), name="start"),
    path("<int:pk>/delete/", views.DeploymentDeleteView.as_view(), name="delete"),
    path("routes/", views.RouteListView.as_view(), name="route_list"),
    path("routes/new/", views.RouteFormView.as_view(), name="route_create"),
    path("routes/<int:pk>/", views.RouteDetailView.as_view(), name="route_detail"),
    path("routes/<int:pk>/edit/", views.RouteFormView.as_view(), name="route_edit"),
    path("routes/<int:pk>/delete/", views.RouteDeleteView.as_view(), name="route_delete"),
    path("routes/<int:pk>/targets/", views.RouteTargetSetView.as_view(), name="route_target_set"),
    path("routes/<int:pk>/free/", views.RouteFreeView.as_view(), name="route_free"),
    path("routes/<int:pk>/cache/", cache_views.RouteCacheView.as_view(), name="route_cache"),
    path("routes/<int:pk>/cache/drop/", cache_views.RouteCacheDropView.as_view(), name="route_cache_drop"),
    path("<int:pk>/faults/", rollout_views.DeploymentFaultsView.as_view(), name="faults"),
    path("rollouts/", rollout_views.RolloutListView.as_view(), name="rollout_list"),
    path("rollouts/new/", rollout_views.RolloutCreateView.as_view(), name="rollout_create"),
    path("rollouts/<int:pk>/", rollout_views.RolloutDetailView.as_view(), name="rollout_detail"),
    path(
        "rollouts/<int:pk>/chart-data/",
        rollout_views.RolloutChartDataView.as_view(),
        name="rollout_chart_data",
    ),
    path(
        "rollouts/<int:pk>/<str:action>/",
        rollout_views.RolloutActionView.as_view(),
        name="rollout_action",
    ),
    path(
        "routes/<int:pk>/targets/<int:target_pk>/delete/",
        views.RouteTargetDeleteView.as_view(),
        name="route_target_delete",
    ),
]
