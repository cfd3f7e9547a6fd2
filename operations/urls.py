from django.urls import path

from operations import views

app_name = "operations"

urlpatterns = [
    path("slos/", views.SloListView.as_view(), name="slo_list"),
    path("slos/new/", views.SloCreateView.as_view(), name="slo_create"),
    path("slos/<int:pk>/delete/", views.SloDeleteView.as_view(), name="slo_delete"),
    path("incidents/", views.IncidentListView.as_view(), name="incident_list"),
    path("incidents/<int:pk>/", views.IncidentDetailView.as_view(), name="incident_detail"),
    path("routes/<int:route_id>/slos/", views.RouteSloPanelView.as_view(), name="route_slos"),
    path("routes/<int:route_id>/playbook/", views.PlaybookPolicyView.as_view(), name="playbook_policy"),
    path("rehearsals/", views.RehearsalListView.as_view(), name="rehearsal_list"),
    path("rehearsals/<int:pk>/", views.RehearsalDetailView.as_view(), name="rehearsal_detail"),
    path("mitigations/<int:pk>/<slug:verb>/", views.MitigationActionView.as_view(), name="mitigation_action"),
]
