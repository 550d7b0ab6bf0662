"""payments.api: the HTTP interface. Views (:mod:`.views`, :mod:`.webhook_views`, the
shopper's return from a customer action :mod:`.customer_views`), the strict
JSON parser (:mod:`.parsers`), the inputs (:mod:`.serializers`, :mod:`.webhook_serializers`),
the per-merchant limits (:mod:`.limits`), the card-data refusal (:mod:`.card_data`), the HTTP
answers (:mod:`.responses`), the problem details (:mod:`.problems`) and the OpenAPI document
(:mod:`.openapi`, read from the inputs, and :mod:`.openapi_answers`; ADR 0043).

May import every room below it: payments.operations, payments.authorization,
payments.reconciliation, payments.monitoring, payments.acquirer, payments.core. Never
payments.admin.
"""
