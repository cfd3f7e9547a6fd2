from django.urls import path

from audit.api import views

app_name = "audit-api"

urlpatterns = [
    path("events/", views.AuditEventListView.as_view(), name="event_list"),
]
