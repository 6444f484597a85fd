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


def test_this_device_has_a_profile_from_its_driver():
    dev = device.get()
    p = dev.profile
    assert p.driver == dev.driver and p.layout in ("cpu", "gpu")
    if dev.driver == "lavapipe":      # the CPU driver CI runs: its workarounds are on
        assert p.cpu and p.merge and p.texels and p.loop_limit == 65535 and p.hoist_meta


def test_profiles_by_driver():
    lvp = device.profile_for("lavapipe", 4, True, 32)
    swift = device.profile_for("swiftshader", 4, True, 32)
    gpu = device.profile_for("nvidia", 2, True, 1 << 20)
    assert lvp.merge and lvp.dynamic and lvp.texels and lvp.wide_loads and lvp.loop_limit
    # another CPU driver: the CPU layouts, none of lavapipe's workarounds
    assert swift.cpu and swift.layout == "cpu" and not (swift.merge or swift.texels or swift.loop_limit)
    assert not gpu.cpu and gpu.layout == "gpu" and not (gpu.merge or gpu.texels or gpu.hoist_meta)
    assert not device.profile_for("lavapipe", 4, False, 32).wide_loads   # uint64 pairs need int64
    assert gpu.max_leaves == 12 and lvp.max_leaves == 12 and device.profile_for("other", 2, True, 8).max_leaves == 2


def test_profile_variants_are_values_and_using_restores():
    import dataclasses
    dev = device.get()
    old = dev.profile
    v = dataclasses.replace(old, texels=not old.texels)
    assert v != old and hash(v) != hash(old) and dataclasses.replace(v, texels=old.texels) == old
    with device.using(texels=False, merge=False) as p:
        assert dev.profile is p and not p.texels and not p.merge
    assert dev.profile is old
