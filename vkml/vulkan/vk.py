"""The `vulkan` cffi bindings, imported once with an error that says how to fix a missing loader."""
try:
    import vulkan as vk  # noqa: F401
except OSError as e:  # the bindings dlopen libvulkan.so.1 at import
    raise ImportError(
        "vkml: the Vulkan loader (libvulkan.so.1) is missing. On Debian/Ubuntu run "
        "`apt-get install libvulkan1 mesa-vulkan-drivers glslang-tools` (lavapipe gives a CPU "
        f"device), or use the README's setup command. Original error: {e}") from e
ffi = vk.ffi
lib = vk.lib
