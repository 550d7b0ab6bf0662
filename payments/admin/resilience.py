"""The acquirer resilience page of the operations console: ``/admin/payments/resilience/``.

Per configured acquirer (``?acquirer=<name>``, default the first in routing order; a link per
acquirer at the top): its client's circuit breakers per endpoint group, its rate gate, retry
budget and AIMD limit, read without side effects (:mod:`payments.acquirer.selectors`); force open /
disable / reset per group with a note (``payments.operate_breaker``, the ``operator`` group,
data migration 0005), applied and audited by :mod:`payments.acquirer.services`: recorded in the
admin history and in the breaker's own log with the operator and the note. Reading needs
``payments.view_payment`` (``support`` and ``operator``).

An ``AdminSite`` has no registry for views without a model: the project's site
(``config.admin.PaymentServiceAdminSite``) serves :meth:`ResilienceAdmin.get_urls` and lists the
page under Payments with :meth:`ResilienceAdmin.add_to_app_list`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import urlencode

from payments.acquirer.selectors import (
    acquirer_client_or_none,
    acquirer_names,
    breaker_groups,
    breaker_history,
    breaker_snapshot,
    resilience_state,
)
from payments.acquirer.services import (
    BREAKER_ACTION_LABELS,
    BreakerActionNotAudited,
    breaker_change_summary,
    breaker_disable,
    breaker_force_open,
    breaker_reset,
)
from payments.admin.forms import NoteForm
from resilience import BreakerSnapshot

__all__ = ["BREAKER_ACTIONS", "ResilienceAdmin"]

#: Acting on a circuit breaker (force open, disable, reset): the ``operator`` group (0005).
BREAKER_PERMISSION = "payments.operate_breaker"
#: Reading the resilience page: whoever may view payments (``support`` and ``operator``).
RESILIENCE_VIEW_PERMISSION = "payments.view_payment"


@dataclass(frozen=True)
class BreakerAction:
    """One operator action on a breaker: its button, the service that applies it, its page."""

    label: str
    operate: Callable[..., tuple[BreakerSnapshot, BreakerSnapshot]]
    explanation: str


BREAKER_ACTIONS: dict[str, BreakerAction] = {
    "force_open": BreakerAction(
        BREAKER_ACTION_LABELS["force_open"],
        breaker_force_open,
        "Refuses every call of this endpoint group at once, without sending anything, until "
        "someone resets it. For authorize: POST /payments answers 503 acquirer_unavailable "
        "(nothing stored, the merchant's key stays free, nothing charged). For lookup: "
        "reconciliation postpones its checks; processing payments stay processing. Use it when "
        "the acquirer is known to be down or asks us to stop sending, and the breaker has not "
        "opened by itself, or for an announced maintenance window.",
    ),
    "disable": BreakerAction(
        BREAKER_ACTION_LABELS["disable"],
        breaker_disable,
        "Admits every call and records nothing: the breaker never opens until someone resets "
        "it. Retries, the retry budget, the rate gate and the concurrency limit still protect "
        "the acquirer. Use it only when the breaker opens for something that is not an "
        "acquirer outage (a misclassified answer, our own network), while you investigate.",
    ),
    "reset": BreakerAction(
        BREAKER_ACTION_LABELS["reset"],
        breaker_reset,
        "Clears any override (forced open, disabled) and closes the breaker with an empty "
        "window and a new generation: calls are admitted at once. Use it to end a forced open "
        "or a disable, or to close an open breaker once the acquirer confirms it has "
        "recovered, instead of waiting for the probes. If the acquirer still fails, the "
        "breaker opens again after the minimum number of failed calls.",
    ),
}

MEMORY_STORE_WARNING = (
    "The acquirer state store is in memory (ACQUIRER_STATE_REDIS_URL is not set): what this "
    "page shows and every action on it concern only the process that answered this request. "
    "Other web workers and the Celery worker keep their own breakers. Production must set "
    "ACQUIRER_STATE_REDIS_URL."
)
FALLBACK_STORE_WARNING = (
    "Redis (ACQUIRER_STATE_REDIS_URL) is unreachable: this page shows this process's local "
    "fallback, and an action now affects only this process and is lost when Redis answers "
    "again. Other processes each decide alone until then."
)


class ResilienceAdmin:
    """The resilience page of an ``AdminSite``: ``/admin/payments/resilience/`` and one action
    page per endpoint group and action.

    The site adds :meth:`get_urls` to its own (names ``admin:payments_resilience`` and
    ``admin:payments_resilience_action``) and passes its app list through
    :meth:`add_to_app_list`, which lists the page under Payments on the admin index, the app
    index and the navigation sidebar."""

    template = "admin/payments/resilience.html"
    action_template = "admin/payments/resilience_action.html"

    def __init__(self, site: admin.AdminSite) -> None:
        self.site = site

    def get_urls(self) -> list[URLPattern]:
        """The page and its action pages, each wrapped by the site's ``admin_view`` (login,
        ``never_cache``, CSRF)."""
        wrap = self.site.admin_view
        return [
            path("payments/resilience/", wrap(self.page_view), name="payments_resilience"),
            path(
                "payments/resilience/<str:group>/<str:action>/",
                wrap(self.action_view),
                name="payments_resilience_action",
            ),
        ]

    # --- permissions -------------------------------------------------------------------------

    @staticmethod
    def has_view_permission(request) -> bool:
        return request.user.has_perm(RESILIENCE_VIEW_PERMISSION)

    @staticmethod
    def has_operate_permission(request) -> bool:
        return request.user.has_perm(BREAKER_PERMISSION)

    # --- the admin index and sidebar ----------------------------------------------------------

    def add_to_app_list(self, request, app_list: list[dict]) -> list[dict]:
        """Add "Acquirer resilience" to the payments app of ``app_list`` (when it is there)."""
        if not self.has_view_permission(request):
            return app_list
        for app in app_list:
            if app.get("app_label") != "payments":
                continue
            if not any(m.get("object_name") == "Resilience" for m in app["models"]):
                app["models"].append(
                    {
                        "model": None,
                        "name": "Acquirer resilience",
                        "object_name": "Resilience",
                        "perms": {"view": True},
                        "admin_url": reverse(
                            "admin:payments_resilience", current_app=self.site.name
                        ),
                        "add_url": None,
                        "view_only": True,
                    }
                )
                app["models"].sort(key=lambda m: m["name"])
        return app_list

    # --- views -------------------------------------------------------------------------------

    def _context(self, request, title: str, **extra) -> dict[str, Any]:
        return {
            **self.site.each_context(request),
            "title": title,
            "app_label": "payments",
            "resilience_url": reverse("admin:payments_resilience", current_app=self.site.name),
            **extra,
        }

    def page_view(self, request: HttpRequest) -> HttpResponse:
        """The page: breakers, rate gate, retry budget, AIMD limit, recent actions."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        names = acquirer_names()
        chosen_name = request.GET.get("acquirer") or (names[0] if names else None)
        if names and chosen_name not in names:
            raise Http404("No such acquirer.")
        client = acquirer_client_or_none(chosen_name)
        query_name = chosen_name if len(names) > 1 else None  # one acquirer: plain URLs
        state = resilience_state(client) if client is not None else None
        can_operate = self.has_operate_permission(request)
        if state is not None and can_operate:
            for row in state["breakers"]:
                row["actions"] = [
                    (action.label, self._action_url(query_name, row["group"], name))
                    for name, action in BREAKER_ACTIONS.items()
                ]
        page_url = reverse("admin:payments_resilience", current_app=self.site.name)
        context = self._context(
            request,
            "Acquirer resilience",
            acquirers=[
                {"name": name, "url": f"{page_url}?{urlencode({'acquirer': name})}"}
                for name in names
            ],
            chosen_acquirer=chosen_name,
            state=state,
            can_operate=can_operate,
            memory_store_warning=MEMORY_STORE_WARNING,
            fallback_store_warning=FALLBACK_STORE_WARNING,
            history=breaker_history(),
        )
        return TemplateResponse(request, self.template, context)

    def _action_url(self, acquirer: str | None, group: str, action: str) -> str:
        url = reverse(
            "admin:payments_resilience_action", args=[group, action], current_app=self.site.name
        )
        return url if acquirer is None else f"{url}?{urlencode({'acquirer': acquirer})}"

    def action_view(self, request: HttpRequest, group: str, action: str) -> HttpResponse:
        """Force open / disable / reset one group of one acquirer (``?acquirer=``, default the
        first in routing order): a page with a required note, then the breaker call (with the
        operator and note) and an admin-history row naming the acquirer."""
        if not self.has_operate_permission(request):
            raise PermissionDenied
        chosen = BREAKER_ACTIONS.get(action)
        acquirer = request.GET.get("acquirer") or None
        client = acquirer_client_or_none(acquirer)
        if chosen is None or client is None or group not in breaker_groups(client):
            raise Http404("No such breaker action.")
        form = NoteForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            note = form.cleaned_data["note"]
            try:
                before, after = chosen.operate(group, actor=request.user, note=note, client=client)
            except BreakerActionNotAudited as exc:
                summary = breaker_change_summary(action, exc.before, exc.after)
                messages.error(
                    request,
                    f"{summary}. Applied, but NOT recorded in the admin history (database "
                    "error); the gateway_client.breaker log has your name and note.",
                )
            else:
                summary = breaker_change_summary(action, before, after)
                level = messages.SUCCESS if after.store == "redis" else messages.WARNING
                scope = (
                    "every process sharing the state store"
                    if after.store == "redis"
                    else "THIS PROCESS ONLY (no shared state store)"
                )
                messages.add_message(request, level, f"{summary}; applies to {scope}.")
            page_url = reverse("admin:payments_resilience", current_app=self.site.name)
            if acquirer is not None:
                page_url = f"{page_url}?{urlencode({'acquirer': acquirer})}"
            return HttpResponseRedirect(page_url)
        snapshot = breaker_snapshot(client, group)
        context = self._context(
            request,
            f"{chosen.label} the {group} circuit breaker of {client.config.name}",
            form=form,
            group=group,
            action=chosen,
            snapshot=snapshot,
            memory_store_warning=MEMORY_STORE_WARNING
            if snapshot is not None and snapshot.store == "memory"
            else "",
            fallback_store_warning=FALLBACK_STORE_WARNING
            if snapshot is not None and snapshot.store == "fallback"
            else "",
        )
        return TemplateResponse(request, self.action_template, context)
