// Under LeakSanitizer only: keeps Mesa's CPU Vulkan driver (lavapipe) loaded
// for the whole test process.
//
// Why: the Vulkan loader unloads a driver when its instance is destroyed, and
// lavapipe (Debian 12's mesa 22.3.6) keeps a 128-byte buffer from a global
// for as long as it is loaded. Once it is unloaded, nothing points at that
// buffer any more and LeakSanitizer reports it at exit, from "<unknown
// module>", a frame no suppression can name. Held loaded, the buffer stays
// reachable and is not reported; leaks of strata's own are reported as before.
#if defined(__SANITIZE_ADDRESS__) && STRATA_HAVE_VULKAN
#include <dlfcn.h>

namespace {

// Never closed. Absent (no lavapipe on this machine): nothing to keep.
[[maybe_unused]] void* const g_lavapipe = dlopen("libvulkan_lvp.so", RTLD_LAZY | RTLD_LOCAL);

}  // namespace
#endif
