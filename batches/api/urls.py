from django.urls import path

from batches.api import views

urlpatterns = [
    path("", views.BatchList.as_view(), name="api-batch-list"),
    path("<str:pk>/", views.BatchDetail.as_view(), name="api-batch-detail"),
]
