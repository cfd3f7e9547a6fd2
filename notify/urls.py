from django.urls import path

from notify import views

app_name = "notify"

urlpatterns = [
    path("", views.NotificationListView.as_view(), name="notification_list"),
    path("badge/", views.NotificationBadgeView.as_view(), name="notification_badge"),
    path("<int:pk>/read/", views.NotificationReadView.as_view(), name="notification_read"),
    path("tenants/<slug:slug>/webhook/", views.TenantWebhookView.as_view(), name="tenant_webhook"),
    path("oncall/", views.OnCallView.as_view(), name="oncall"),
    path("oncall/rota/", views.RotaSetView.as_view(), name="rota_set"),
    path("oncall/webhooks/", views.PlatformWebhookAddView.as_view(), name="platform_webhook_add"),
    path("oncall/webhooks/<int:pk>/", views.PlatformWebhookRemoveView.as_view(), name="platform_webhook"),
    path("pages/<int:pk>/ack/", views.PageAckView.as_view(), name="page_ack"),
]
