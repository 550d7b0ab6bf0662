"""OpenAPI description of the Bearer API key authentication (drf-spectacular extension)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer sk_test_...`` or ``sk_live_...`` as an HTTP bearer scheme."""

    target_class = "merchants.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "A merchant API key: `sk_test_...` where no real money can move (sandbox "
                "acquirers only), `sk_live_...` otherwise (python manage.py create_merchant)."
            ),
        }
