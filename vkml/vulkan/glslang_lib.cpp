// glslang in process: vkml's kernels compiled as glslangValidator compiles them
// (`-V --target-env vulkan1.1`), without its per-process start-up. glslangValidator builds
// its built-in symbol tables in every process (~150 ms, whatever the shader); a library
// loaded once keeps them, so a kernel costs only its own parse and code generation.
// Built by vkml/vulkan/glslang_lib.py against Debian's glslang-dev static libraries.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <glslang/Public/ResourceLimits.h>
#include <glslang/Public/ShaderLang.h>
#include <glslang/SPIRV/GlslangToSpv.h>

namespace {
std::once_flag init_once;

char* copy_out(const std::string& s) {
    char* p = static_cast<char*>(std::malloc(s.size() + 1));
    if (p) std::memcpy(p, s.c_str(), s.size() + 1);
    return p;
}
}  // namespace

extern "C" {

// Compiles one GLSL compute shader. On success returns 0 and sets *words / *n_words
// (SPIR-V, malloc'd); on failure returns 1 and sets *log (malloc'd). Thread-safe: each
// call has its own TShader and TProgram; glslang guards its shared symbol tables.
int vkml_glslang_compile(const char* source, unsigned int** words, size_t* n_words, char** log) {
    *words = nullptr;
    *n_words = 0;
    *log = nullptr;
    std::call_once(init_once, [] { glslang::InitializeProcess(); });
    const EShMessages messages = static_cast<EShMessages>(EShMsgSpvRules | EShMsgVulkanRules);
    glslang::TShader shader(EShLangCompute);
    const char* sources[] = {source};
    shader.setStrings(sources, 1);
    shader.setEnvInput(glslang::EShSourceGlsl, EShLangCompute, glslang::EShClientVulkan, 100);
    shader.setEnvClient(glslang::EShClientVulkan, glslang::EShTargetVulkan_1_1);
    shader.setEnvTarget(glslang::EShTargetSpv, glslang::EShTargetSpv_1_3);
    if (!shader.parse(GetDefaultResources(), 100, false, messages)) {
        *log = copy_out(std::string(shader.getInfoLog()) + shader.getInfoDebugLog());
        return 1;
    }
    glslang::TProgram program;
    program.addShader(&shader);
    if (!program.link(messages)) {
        *log = copy_out(std::string(program.getInfoLog()) + program.getInfoDebugLog());
        return 1;
    }
    std::vector<unsigned int> spirv;
    spv::SpvBuildLogger logger;
    glslang::SpvOptions options;
    options.disableOptimizer = false;  // as glslangValidator without -Od: GLSL is not optimised
    glslang::GlslangToSpv(*program.getIntermediate(EShLangCompute), spirv, &logger, &options);
    std::string messages_out = logger.getAllMessages();
    if (spirv.empty()) {
        *log = copy_out("no SPIR-V generated\n" + messages_out);
        return 1;
    }
    unsigned int* out = static_cast<unsigned int*>(std::malloc(spirv.size() * sizeof(unsigned int)));
    if (!out) {
        *log = copy_out("out of memory");
        return 1;
    }
    std::memcpy(out, spirv.data(), spirv.size() * sizeof(unsigned int));
    *words = out;
    *n_words = spirv.size();
    return 0;
}

void vkml_glslang_free(void* p) { std::free(p); }

}  // extern "C"
