"""vkml.vulkan.device: the driver settings chosen before the instance exists."""
from vkml.vulkan import device


def test_lavapipe_vectors_on_avx512(monkeypatch):
    monkeypatch.delenv("LP_NATIVE_VECTOR_WIDTH", raising=False)
    monkeypatch.setattr(device, "_cpu_flags", lambda: {"avx2", "avx512f", "fma"})
    device.lavapipe_vectors()
    assert device.os.environ["LP_NATIVE_VECTOR_WIDTH"] == "512"


def test_lavapipe_vectors_keep_the_default_without_avx512(monkeypatch):
    monkeypatch.delenv("LP_NATIVE_VECTOR_WIDTH", raising=False)
    monkeypatch.setattr(device, "_cpu_flags", lambda: {"avx2", "fma"})
    device.lavapipe_vectors()
    assert "LP_NATIVE_VECTOR_WIDTH" not in device.os.environ


def test_lavapipe_vectors_respect_the_users_choice(monkeypatch):
    monkeypatch.setenv("LP_NATIVE_VECTOR_WIDTH", "256")
    monkeypatch.setattr(device, "_cpu_flags", lambda: {"avx512f"})
    device.lavapipe_vectors()
    assert device.os.environ["LP_NATIVE_VECTOR_WIDTH"] == "256"


def test_cpu_flags_read_without_error():
    assert isinstance(device._cpu_flags(), set)
