"""The service's URLs, plus ``GET /campaign/crash`` for the secrets campaign: a view that raises
an unexpected exception whose message holds the query's ``card`` and ``token`` values, as a bug
that puts input into an error would. Only the campaign settings (campaigns/settings.py)
route it; the service never does."""

from django.urls import path

from config.urls import handler400, handler404, handler500  # noqa: F401 - the service's
from config.urls import urlpatterns as service_urlpatterns


def crash(request):
    """Raise ``RuntimeError`` naming the ``card`` and ``token`` query values (a 500)."""
    card, token = request.GET.get("card"), request.GET.get("token")
    raise RuntimeError(f"campaign crash on card {card} with token={token}")


urlpatterns = [*service_urlpatterns, path("campaign/crash", crash)]
