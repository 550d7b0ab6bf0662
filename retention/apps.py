from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "retention"
    verbose_name = "Retention"

    def ready(self) -> None:
        from retention import checks  # noqa: F401  (registers the system checks)
