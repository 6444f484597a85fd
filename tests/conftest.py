"""Test set-up: the suite needs a real Vulkan device and glslangValidator; it fails, never
skips, when either is missing (a green run without Vulkan must be impossible)."""
import os

# lavapipe: without LLVM's optimisation passes a new kernel builds in about half the time
# and runs about a third slower; the suite compiles ~11k distinct kernels from empty caches
# and runs each a few times, so a cold run takes ~0.6x as long (bench/RESULTS.md, "The
# test suite cold"). Mesa keys its shader cache by these flags, so the kernels built here
# never stand in for the optimised ones benchmarks and users run. An explicit
# GALLIVM_PERF (even empty: `GALLIVM_PERF= ./run test`) is kept, to test optimised code.
os.environ.setdefault("GALLIVM_PERF", "nopt")
# Kernels compiled ahead on helper devices (`vkml/vulkan/precompile.py`) use cores a test
# worker does not: the suite's workers already keep every core busy, so there it only adds
# each helper's pipeline creation (tests/vulkan/test_precompile.py turns it on itself).
os.environ.setdefault("VKML_PRECOMPILE", "0")


def pytest_sessionstart(session):
    from vkml.vulkan import compile as _compile, runtime
    _compile.glslang()          # raises GlslangMissingError
    rt = runtime.get()          # raises VulkanUnavailableError / ImportError
    session.config._vkml_device = rt.dev.summary()


def pytest_report_header(config):
    from vkml.vulkan import runtime
    return f"vkml device: {runtime.get().dev.summary()}"


# Property tests (hypothesis) are deterministic in CI: derandomized, no example database,
# no deadline (a first call compiles kernels). A test's own settings may ask for more
# examples: tests/test_properties.py reads VKML_HYPOTHESIS_EXAMPLES.
from hypothesis import settings as _hyp_settings

_hyp_settings.register_profile("vkml", deadline=None, derandomize=True, database=None)
_hyp_settings.load_profile("vkml")
