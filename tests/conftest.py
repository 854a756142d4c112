"""Suite-wide rules.

Tests that need a service (``@pytest.mark.postgres``, ``@pytest.mark.slurm``,
``@pytest.mark.browser``) skip with the
reason when it is absent, so a developer can run the suite anywhere. CI sets
``ASRPT_REQUIRE_SERVICES=1`` after starting the services: there a skip of such a test is a
failure, so a broken service set-up cannot pass as green.
"""

import os

import pytest

SERVICE_MARKERS = ("postgres", "slurm", "browser")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (
        report.skipped
        and os.environ.get("ASRPT_REQUIRE_SERVICES") == "1"
        and any(item.get_closest_marker(m) for m in SERVICE_MARKERS)
    ):
        report.outcome = "failed"
        report.longrepr = f"service required (ASRPT_REQUIRE_SERVICES=1) but the test skipped: {report.longrepr}"
