"""The ``campaign`` marker: ``pytest -m campaign`` runs the short fault campaigns only,
``-m "not campaign"`` skips them."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "campaign: short fault campaigns (campaigns/) against the stack as subprocesses",
    )
