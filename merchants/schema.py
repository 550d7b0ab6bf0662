"""OpenAPI description of the Bearer API key authentication (drf-spectacular extension)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer sk_live_...`` as an HTTP bearer scheme (RFC 6750)."""

    target_class = "merchants.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A merchant API key, `sk_live_...` (python manage.py create_merchant).",
        }
