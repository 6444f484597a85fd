"""Test set-up: the suite needs a real Vulkan device and glslangValidator; it fails, never
skips, when either is missing (a green run without Vulkan must be impossible)."""


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
