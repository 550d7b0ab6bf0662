"""The ``ACQUIRERS`` setting: every acquirer the service may route a payment to, parsed and
validated once, when the settings load (plain Python: no Django app, no gateway_client).

The value is a JSON array of objects (docs/configuration.md, "Acquirers")::

    [{"name": "alpha", "base_url": "https://alpha.example", "api_key": "sk_...",
      "currencies": ["EUR", "USD"], "capture_methods": ["automatic", "manual"],
      "priority": 10, "policy": {"read_timeout_seconds": 2.0}}]

``name``: 1-24 of ``[a-z0-9_-]``, starting with a letter or digit, unique; it keys the
acquirer's breakers, retry budget, rate-gate scope and concurrency limit in the shared state
store, labels its metrics, and is stored on each payment (``Payment.acquirer``). ``base_url``:
``http://`` or ``https://``. ``api_key``: printable ASCII, never shown (kept out of ``repr()``
and out of every error message here). ``currencies``: ISO 4217 codes in upper case, omitted =
every currency. ``capture_methods``: ``automatic`` and/or ``manual``, omitted = both.
``priority``: an integer, lower first (omitted: 100); equal priorities keep the array's order.
``policy``: overrides of the ``ACQUIRER_*`` policy settings for this acquirer only, by the
setting's name without the ``ACQUIRER_`` prefix in lower case (:data:`POLICY_OVERRIDES`).

``type``: the connector (its wire format, ``gateway_client``'s dialect): ``sandbox`` (the
default: our sandbox acquirer), ``stripe`` (PaymentIntents) or ``adyen`` (Checkout v71).
``api_key_env``: the name of the environment variable that
holds the secret (read once, here; then ``api_key`` must be absent): a ``stripe`` acquirer's
secret key comes only from the environment (``sk_...`` or ``rk_...``). A ``stripe`` acquirer
also takes ``api_version`` (required: the ``Stripe-Version`` pinned, ``YYYY-MM-DD``) and
``base_url`` may be omitted (``https://api.stripe.com``); its ``currencies`` may not name ISK
or UGX (Stripe's amounts for them differ from ISO 4217's minor units in a capture or a refund,
which carry no currency), and it never supports them. An ``adyen`` acquirer's API key comes
only from the environment (``api_key_env``, sent as ``X-API-Key``); it takes
``merchant_account`` (required), ``return_url`` (required: the ``returnUrl`` Adyen's
``/payments`` requires, an http(s) URL) and either ``live_url_prefix`` (the live endpoint
``https://<prefix>-checkout-live.adyenpayments.com/checkout/v71``; then no ``base_url``) or
``base_url`` (omitted: Adyen's test endpoint ``https://checkout-test.adyen.com/v71``).

``payment_methods``: the payment-method families the acquirer can charge (ADR 0051), a
non-empty list of :data:`PAYMENT_METHOD_FAMILIES`' names; omitted = its type's own
(:data:`TYPE_PAYMENT_METHODS`: a ``sandbox`` charges ``sandbox_token`` (``tok_...``), a
``stripe`` ``stripe_payment_method`` (``pm_...``), an ``adyen``
``adyen_stored_payment_method`` (``spm_...``)). Routing and failover consider only the
acquirers whose families hold the payment's payment method. Name another family only where the
acquirer really charges it (a test double, or a token proxy in front of the acquirer).

``webhook_secret_env``: the name of the environment variable holding the acquirer's
notification signing secret(s) (``POST /acquirer_notifications/<name>``; docs/connectors.md,
"Notifications"): one secret, or several separated by spaces during a rotation (newest first).
A ``stripe`` acquirer's are its endpoint's ``whsec_...`` secrets; a ``sandbox`` acquirer's are
Standard Webhooks secrets (``whsec_`` + base64); an ``adyen`` acquirer's are its webhook's HMAC
keys (32 to 256 hex digits, as the Customer Area shows them). Without it the acquirer takes no
notifications (its endpoint answers 404) and reconciliation alone finds its outcomes.

Unset or empty: ``None``, and one acquirer is built from the ``ACQUIRER_*`` settings at call
time (``payments.acquirer.client``), as before this setting existed. Bad values raise
``django.core.exceptions.ImproperlyConfigured`` naming the acquirer (by index and name) and
the field, never the value of ``api_key``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "ACQUIRER_TYPES",
    "CAPTURE_METHODS",
    "DEFAULT_PRIORITY",
    "PAYMENT_METHOD_FAMILIES",
    "POLICY_OVERRIDES",
    "TYPE_PAYMENT_METHODS",
    "AcquirerSpec",
    "parse_acquirers",
    "payment_method_family",
]

#: The capture methods an acquirer may support (``payments.models.CaptureMethod`` values).
CAPTURE_METHODS = ("automatic", "manual")
DEFAULT_PRIORITY = 100
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,23}")
_CURRENCY = re.compile(r"[A-Z]{3}")
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")
_FIELDS = frozenset(
    {"name", "base_url", "api_key", "currencies", "capture_methods", "priority", "policy"}
    | {"type", "api_key_env", "api_version", "merchant_account", "return_url", "live_url_prefix"}
    | {"webhook_secret_env", "payment_methods"}
)
#: The connector types ``type`` may name.
ACQUIRER_TYPES = ("sandbox", "stripe", "adyen")
#: The payment-method families (ADR 0051): family name -> the prefix of its tokens in the API's
#: ``payment_method``. A token is charged only by an acquirer of a family that issued it.
PAYMENT_METHOD_FAMILIES = {
    "sandbox_token": "tok_",  # our sandbox acquirer's card tokens
    "stripe_payment_method": "pm_",  # a Stripe PaymentMethod (Stripe.js), of one Stripe account
    "adyen_stored_payment_method": "spm_",  # spm_ + Adyen's storedPaymentMethodId
}
#: The families each connector type charges when ``payment_methods`` is omitted.
TYPE_PAYMENT_METHODS = {
    "sandbox": frozenset({"sandbox_token"}),
    "stripe": frozenset({"stripe_payment_method"}),
    "adyen": frozenset({"adyen_stored_payment_method"}),
}
_FAMILY_OF_PREFIX = {prefix: family for family, prefix in PAYMENT_METHOD_FAMILIES.items()}


def payment_method_family(payment_method: str) -> str | None:
    """The family (:data:`PAYMENT_METHOD_FAMILIES`) of the API's ``payment_method`` token
    (``tok_visa`` -> ``sandbox_token``), read from its prefix up to the first ``_``; None for a
    token of no known family. Plain string work: one split, one dictionary read."""
    prefix, underscore, _ = payment_method.partition("_")
    return _FAMILY_OF_PREFIX.get(prefix + underscore) if underscore else None


#: Fields only one type takes.
_TYPE_FIELDS = {
    "api_version": "stripe",
    "merchant_account": "adyen",
    "return_url": "adyen",
    "live_url_prefix": "adyen",
}
#: Types whose secret comes only from the environment (``api_key_env``).
_SECRET_FROM_ENV = frozenset({"stripe", "adyen"})
_STRIPE_BASE_URL = "https://api.stripe.com"
_ADYEN_TEST_BASE_URL = "https://checkout-test.adyen.com/v71"
_ADYEN_MERCHANT_ACCOUNT = re.compile(r"[A-Za-z0-9_.\-]{1,80}")
_ADYEN_LIVE_PREFIX = re.compile(r"[a-z0-9]{1,40}(-[a-z0-9]{1,40}){0,3}")
_STRIPE_API_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}(\.[a-z]+)?")
_STRIPE_SECRET = re.compile(r"(sk|rk)_[A-Za-z0-9_]{3,}")
#: Zero-decimal in ISO 4217, two-decimal on Stripe: never routed to a Stripe acquirer.
STRIPE_EXCLUDED_CURRENCIES = frozenset({"ISK", "UGX"})
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _percent(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 100


def _fraction(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1


def _flag(value: object) -> bool:
    return isinstance(value, bool)


def _label(value: object) -> bool:
    return isinstance(value, str) and bool(_VISIBLE_ASCII.fullmatch(value))


#: ``policy`` key -> (what it must be, the check). Key ``k`` overrides ``ACQUIRER_<K>``.
POLICY_OVERRIDES: dict[str, tuple[str, Any]] = {
    "connect_timeout_seconds": ("seconds > 0", _seconds),
    "read_timeout_seconds": ("seconds > 0", _seconds),
    "honours_idempotency_keys": ("a boolean", _flag),
    "quota_profile": ("one of auto, ietf, github, retry-after", None),
    "rate_scope": ("printable ASCII", _label),
    "retry_max_attempts": ("an integer >= 1", _count),
    "retry_backoff_base_seconds": ("seconds > 0", _seconds),
    "retry_backoff_cap_seconds": ("seconds > 0", _seconds),
    "max_server_wait_seconds": ("seconds > 0", _seconds),
    "min_attempt_seconds": ("seconds > 0", _seconds),
    "retry_ambiguous": ("a boolean", _flag),
    "retry_budget_percent": ("a fraction from 0 to 1", _fraction),
    "retry_budget_min_per_second": ("seconds > 0", _seconds),
    "retry_budget_ttl_seconds": ("seconds > 0", _seconds),
    "breaker_window_size": ("an integer >= 1", _count),
    "breaker_minimum_calls": ("an integer >= 1", _count),
    "breaker_failure_rate_threshold": ("a percentage from 0 to 100", _percent),
    "breaker_open_seconds": ("seconds > 0", _seconds),
    "breaker_half_open_permits": ("an integer >= 1", _count),
    "concurrency_initial_limit": ("an integer >= 1", _count),
    "concurrency_max_limit": ("an integer >= 1", _count),
    "concurrency_wait_seconds": ("seconds > 0", _seconds),
}
_QUOTA_PROFILES = ("auto", "ietf", "github", "retry-after")


@dataclass(frozen=True, slots=True)
class AcquirerSpec:
    """One configured acquirer (see the module docstring). ``currencies`` None: every ISO 4217
    currency. ``policy``: ``(setting name, value)`` pairs overriding ``ACQUIRER_*`` settings,
    e.g. ``(("ACQUIRER_READ_TIMEOUT_SECONDS", 2.0),)``. ``api_key`` is kept out of repr().
    ``type``: the connector (``sandbox``, ``stripe`` or ``adyen``); ``api_version``: a
    ``stripe`` acquirer's pinned ``Stripe-Version`` (None for the others);
    ``merchant_account`` and ``return_url``: an ``adyen`` acquirer's (None for the others).
    ``webhook_secrets``: the notification signing secrets, newest first (empty: no
    notifications), kept out of repr(). ``payment_methods``: the payment-method families it
    charges (None: its type's, :data:`TYPE_PAYMENT_METHODS`)."""

    name: str
    base_url: str
    api_key: str = field(repr=False)
    currencies: frozenset[str] | None = None
    capture_methods: frozenset[str] = frozenset(CAPTURE_METHODS)
    priority: int = DEFAULT_PRIORITY
    policy: tuple[tuple[str, Any], ...] = ()
    type: str = "sandbox"
    api_version: str | None = None
    merchant_account: str | None = None
    return_url: str | None = None
    webhook_secrets: tuple[str, ...] = field(default=(), repr=False)
    payment_methods: frozenset[str] | None = None

    @property
    def payment_method_families(self) -> frozenset[str]:
        """The payment-method families this acquirer charges: ``payment_methods``, else its
        type's (:data:`TYPE_PAYMENT_METHODS`)."""
        if self.payment_methods is not None:
            return self.payment_methods
        return TYPE_PAYMENT_METHODS[self.type]

    def supports(self, currency: str, capture_method: str, family: str | None = None) -> bool:
        """Whether this acquirer takes a payment in ``currency`` (ISO 4217) with
        ``capture_method`` (``automatic`` or ``manual``) and, when ``family`` is given, a
        payment method of that family (:func:`payment_method_family`); a ``stripe`` acquirer
        never takes ISK or UGX."""
        if self.type == "stripe" and currency in STRIPE_EXCLUDED_CURRENCIES:
            return False
        if family is not None and family not in self.payment_method_families:
            return False
        return capture_method in self.capture_methods and (
            self.currencies is None or currency in self.currencies
        )

    def setting(self, name: str, default: Any) -> Any:
        """The value of the ``ACQUIRER_*`` setting ``name`` for this acquirer: its override,
        else ``default`` (the global setting's value)."""
        return dict(self.policy).get(name, default)


_SHOWABLE = re.compile(r"[A-Za-z_]{1,40}")


def _shown(text: str) -> str:
    """``text`` quoted when it looks like a field name or a code, else a placeholder: a
    misplaced secret is never echoed."""
    return repr(text) if _SHOWABLE.fullmatch(text) else "(not shown)"


def _fail(where: str, problem: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"ACQUIRERS: {where}: {problem}")


def _string_list(where: str, value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise _fail(where, f"must be a non-empty JSON array of {what}")
    if len(set(value)) != len(value):
        raise _fail(where, "lists a value twice")
    return value


def _policy(where: str, value: object) -> tuple[tuple[str, Any], ...]:
    if not isinstance(value, Mapping):
        raise _fail(f"{where}.policy", "must be a JSON object")
    pairs = []
    for key in sorted(value):
        if key not in POLICY_OVERRIDES:
            raise _fail(
                f"{where}.policy",
                f"unknown key {_shown(key)} (known: {', '.join(sorted(POLICY_OVERRIDES))})",
            )
        what, check = POLICY_OVERRIDES[key]
        item = value[key]
        valid = item in _QUOTA_PROFILES if check is None else check(item)
        if not valid:
            raise _fail(f"{where}.policy.{key}", f"must be {what}")
        pairs.append((f"ACQUIRER_{key.upper()}", item))
    return tuple(pairs)


def _currencies(where: str, value: object, known: frozenset[str] | None) -> frozenset[str]:
    codes = _string_list(f"{where}.currencies", value, "ISO 4217 codes")
    for code in codes:
        if not _CURRENCY.fullmatch(code) or (known is not None and code not in known):
            raise _fail(f"{where}.currencies", f"{_shown(code)} is not a supported ISO 4217 code")
    return frozenset(codes)


def _secret(where: str, item: Mapping[str, Any], kind: str, environ: Mapping[str, str]) -> str:
    """The acquirer's secret: ``api_key``, or the variable ``api_key_env`` names (a stripe
    acquirer's only from there). Errors name the field or the variable, never a value."""
    if "api_key_env" in item:
        if "api_key" in item:
            raise _fail(where, "give api_key or api_key_env, not both")
        variable = item["api_key_env"]
        if not isinstance(variable, str) or not _ENV_NAME.fullmatch(variable):
            raise _fail(where, "api_key_env must name an environment variable (A-Z, 0-9, _)")
        api_key = environ.get(variable)
        if not api_key:
            raise _fail(where, f"api_key_env: the environment variable {variable} is not set")
        source = f"the environment variable {variable}"
    elif kind in _SECRET_FROM_ENV:
        raise _fail(where, f"api_key_env is required: a {kind} API key comes from the environment")
    else:
        api_key = item.get("api_key")
        source = "api_key"
    if not isinstance(api_key, str) or not _VISIBLE_ASCII.fullmatch(api_key):
        raise _fail(where, f"{source} must be a non-empty string of printable ASCII (no spaces)")
    if kind == "stripe" and not _STRIPE_SECRET.fullmatch(api_key):
        raise _fail(where, f"{source} must hold a Stripe secret key (sk_... or rk_...)")
    return api_key


_WEBHOOK_SECRET = re.compile(r"whsec_[A-Za-z0-9+/=_-]{8,}")
#: An Adyen webhook's HMAC key: hex, 16 to 128 bytes.
_HMAC_KEY = re.compile(r"(?:[0-9A-Fa-f]{2}){16,128}")


def _webhook_secrets(
    where: str, item: Mapping[str, Any], environ: Mapping[str, str], kind: str = "sandbox"
) -> tuple[str, ...]:
    """The notification secrets the variable ``webhook_secret_env`` names (space-separated),
    or () without it: ``whsec_...`` secrets, or HMAC keys in hex for ``kind`` ``adyen``.
    Errors name the variable, never a value."""
    if "webhook_secret_env" not in item:
        return ()
    variable = item["webhook_secret_env"]
    if not isinstance(variable, str) or not _ENV_NAME.fullmatch(variable):
        raise _fail(where, "webhook_secret_env must name an environment variable (A-Z, 0-9, _)")
    secrets = tuple(environ.get(variable, "").split())
    if not secrets:
        raise _fail(where, f"webhook_secret_env: the environment variable {variable} is not set")
    if kind == "adyen":
        if not all(_HMAC_KEY.fullmatch(secret) for secret in secrets):
            raise _fail(
                where,
                f"the environment variable {variable} must hold HMAC keys (32-256 hex digits), "
                "space-separated",
            )
    elif not all(_WEBHOOK_SECRET.fullmatch(secret) for secret in secrets):
        raise _fail(
            where,
            f"the environment variable {variable} must hold whsec_... secrets, space-separated",
        )
    return secrets


def _spec(
    index: int, item: object, known: frozenset[str] | None, environ: Mapping[str, str]
) -> AcquirerSpec:
    where = f"acquirer {index}"
    if not isinstance(item, Mapping):
        raise _fail(where, "must be a JSON object")
    unknown = sorted(set(item) - _FIELDS)
    if unknown:
        raise _fail(
            where, f"unknown field {_shown(unknown[0])} (known: {', '.join(sorted(_FIELDS))})"
        )
    name = item.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _fail(
            where, "name must be 1-24 of a-z, 0-9, _ and -, starting with a letter or digit"
        )
    where = f"acquirer {index} ({name})"
    kind = item.get("type", "sandbox")
    if kind not in ACQUIRER_TYPES:
        raise _fail(where, f"type must be one of {', '.join(ACQUIRER_TYPES)}")
    for field_name, only in _TYPE_FIELDS.items():
        if field_name in item and kind != only:
            raise _fail(where, f"{field_name} is a field of type {only!r} only")
    base_url = item.get("base_url", _STRIPE_BASE_URL if kind == "stripe" else None)
    merchant_account = return_url = None
    if kind == "adyen":
        base_url, merchant_account, return_url = _adyen_fields(where, item)
    parts = urlsplit(base_url) if isinstance(base_url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise _fail(where, "base_url must be an http:// or https:// URL with a host")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise _fail(where, "base_url must have no credentials, query or fragment")
    api_key = _secret(where, item, kind, environ)
    api_version = None
    if kind == "stripe":
        api_version = item.get("api_version")
        if not isinstance(api_version, str) or not _STRIPE_API_VERSION.fullmatch(api_version):
            raise _fail(where, "api_version must be the pinned Stripe-Version, like 2024-06-20")
    currencies = None
    if "currencies" in item:
        currencies = _currencies(where, item["currencies"], known)
        if kind == "stripe" and currencies & STRIPE_EXCLUDED_CURRENCIES:
            raise _fail(f"{where}.currencies", "a stripe acquirer cannot take ISK or UGX")
    capture_methods = frozenset(CAPTURE_METHODS)
    if "capture_methods" in item:
        methods = _string_list(f"{where}.capture_methods", item["capture_methods"], "strings")
        if not set(methods) <= set(CAPTURE_METHODS):
            raise _fail(f"{where}.capture_methods", "may hold only automatic and manual")
        capture_methods = frozenset(methods)
    payment_methods = None
    if "payment_methods" in item:
        families = _string_list(f"{where}.payment_methods", item["payment_methods"], "strings")
        unknown_families = sorted(set(families) - set(PAYMENT_METHOD_FAMILIES))
        if unknown_families:
            raise _fail(
                f"{where}.payment_methods",
                f"unknown family {_shown(unknown_families[0])} "
                f"(known: {', '.join(PAYMENT_METHOD_FAMILIES)})",
            )
        payment_methods = frozenset(families)
    priority = item.get("priority", DEFAULT_PRIORITY)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise _fail(where, "priority must be an integer (lower is tried first)")
    policy = _policy(where, item["policy"]) if "policy" in item else ()
    return AcquirerSpec(
        name=name,
        base_url=base_url.rstrip("/"),
        api_key=api_key,
        currencies=currencies,
        capture_methods=capture_methods,
        priority=priority,
        policy=policy,
        type=kind,
        api_version=api_version,
        merchant_account=merchant_account,
        return_url=return_url,
        webhook_secrets=_webhook_secrets(where, item, environ, kind),
        payment_methods=payment_methods,
    )


def _adyen_fields(where: str, item: Mapping[str, Any]) -> tuple[str, str, str]:
    """An ``adyen`` acquirer's base URL (``base_url``, the live endpoint of
    ``live_url_prefix``, or Adyen's test endpoint), ``merchant_account`` and ``return_url``."""
    merchant_account = item.get("merchant_account")
    if not isinstance(merchant_account, str) or not _ADYEN_MERCHANT_ACCOUNT.fullmatch(
        merchant_account
    ):
        raise _fail(where, "merchant_account is required: 1-80 of A-Z, a-z, 0-9, _, . and -")
    return_url = item.get("return_url")
    parts = urlsplit(return_url) if isinstance(return_url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise _fail(where, "return_url is required: an http:// or https:// URL")
    if "live_url_prefix" in item:
        if "base_url" in item:
            raise _fail(where, "give base_url or live_url_prefix, not both")
        prefix = item["live_url_prefix"]
        if not isinstance(prefix, str) or not _ADYEN_LIVE_PREFIX.fullmatch(prefix):
            raise _fail(where, "live_url_prefix must be lower-case letters, digits and hyphens")
        base_url = f"https://{prefix}-checkout-live.adyenpayments.com/checkout/v71"
    else:
        base_url = item.get("base_url", _ADYEN_TEST_BASE_URL)
    return base_url, merchant_account, return_url


def parse_acquirers(
    raw: str | None,
    *,
    known_currencies: frozenset[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[AcquirerSpec, ...] | None:
    """Parse the ``ACQUIRERS`` JSON value into :class:`AcquirerSpec` s in routing order
    (priority ascending, then the array's order). ``None`` or blank: ``None`` (the single
    acquirer of the ``ACQUIRER_*`` settings). ``known_currencies``: the ISO 4217 codes a
    currency list may name (None: any three capital letters; the settings pass None, and the
    system check ``payments.E004`` compares each code with the currencies ``payments.core.money``
    supports once the apps are loaded). ``environ``: where ``api_key_env`` is read (None:
    ``os.environ``).

    Raises ``ImproperlyConfigured`` on a value that is not JSON, not a non-empty array of
    objects, an unknown field or policy key, a bad field, or a name used twice; the message
    names the acquirer and the field and never quotes an ``api_key``.
    """
    if raw is None or not raw.strip():
        return None
    try:
        document = json.loads(raw)
    except ValueError as exc:
        # The parser's message quotes nothing of the value but its position.
        raise ImproperlyConfigured(
            f"ACQUIRERS is not valid JSON (line {getattr(exc, 'lineno', '?')}, column "
            f"{getattr(exc, 'colno', '?')})"
        ) from None
    if not isinstance(document, list) or not document:
        raise ImproperlyConfigured("ACQUIRERS must be a non-empty JSON array of objects")
    env = os.environ if environ is None else environ
    specs = [_spec(index, item, known_currencies, env) for index, item in enumerate(document)]
    names = [spec.name for spec in specs]
    for name in names:
        if names.count(name) > 1:
            raise ImproperlyConfigured(f"ACQUIRERS: the name {name!r} is used twice")
    order = sorted(range(len(specs)), key=lambda i: (specs[i].priority, i))
    return tuple(specs[i] for i in order)
