from django.urls import path

from operations import views

app_name = "operations"

urlpatterns = [
    path("slos/", views.SloListView.as_view(), name="slo_list"),
    path("slos/new/", views.SloCreateView.as_view(), name="slo_create"),
    path("slos/<int:pk>/delete/", views.SloDeleteView.as_view(), name="slo_delete"),
    path("routes/<int:route_id>/slos/", views.RouteSloPanelView.as_view(), name="route_slos"),
]
