import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# CI draws the same 1,000 examples on every run, so a red run is reproduced by running it again
settings.register_profile(
    "ci",
    max_examples=1000,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_configure(config):
    """Compiled search expressions go to a cache of the test session, not the user's. The torch
    reference's ranks start from a fork server that has imported torch once (a module it cannot
    import is skipped)."""
    import multiprocessing
    import tempfile

    os.environ.setdefault("ANALYTIC_CACHE", tempfile.mkdtemp(prefix="analytic-test-cache-"))
    multiprocessing.set_forkserver_preload(
        ["torch.distributed", "analytic.reference.collectives", "analytic.reference.step_memory"]
    )
