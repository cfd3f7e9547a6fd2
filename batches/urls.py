from django.urls import path

from batches import views

app_name = "batches"

urlpatterns = [
    path("", views.BatchListView.as_view(), name="list"),
    path("prices/", views.BatchPriceView.as_view(), name="prices"),
    path("<str:batch_id>/", views.BatchDetailView.as_view(), name="detail"),
    path("<str:batch_id>/cancel/", views.BatchCancelView.as_view(), name="cancel"),
    path("<str:batch_id>/files/<str:which>/", views.BatchFileView.as_view(), name="file"),
]
