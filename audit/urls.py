from django.urls import path

from audit import views

app_name = "audit"

urlpatterns = [
    path("", views.EventListView.as_view(), name="event_list"),
    path("verify/", views.ChainVerifyView.as_view(), name="verify"),
    path("export.json", views.ExportView.as_view(kind="json"), name="export_json"),
    path("export.csv", views.ExportView.as_view(kind="csv"), name="export_csv"),
]
