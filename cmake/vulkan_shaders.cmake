# The Vulkan backend's compute shaders (src/vulkan/*.comp) compiled to SPIR-V
# by glslc at build time and embedded in strata_vulkan (vulkan/vk_shaders.h
# finds them by name). A shader that reads weights is built once per weight
# format, with -DFMT=<n> (the numbering of vulkan/vk_formats.h).
set(STRATA_SHADER_DIR ${CMAKE_CURRENT_SOURCE_DIR}/vulkan)
set(STRATA_SPIRV_DIR ${PROJECT_BINARY_DIR}/spirv)
file(MAKE_DIRECTORY ${STRATA_SPIRV_DIR})
file(GLOB STRATA_SHADER_INCLUDES CONFIGURE_DEPENDS ${STRATA_SHADER_DIR}/*.glsl)

# name of the shader in the binary, its source, glslc's extra arguments.
set(STRATA_SPVS "")
set(STRATA_SPV_FILES "")
function(strata_shader name source)
  set(spv ${STRATA_SPIRV_DIR}/${name}.spv)
  add_custom_command(OUTPUT ${spv}
    COMMAND ${GLSLC_EXECUTABLE} --target-env=vulkan1.2 -O -Werror ${ARGN} -o ${spv} ${STRATA_SHADER_DIR}/${source}
    DEPENDS ${STRATA_SHADER_DIR}/${source} ${STRATA_SHADER_INCLUDES}
    COMMENT "glslc ${name}" VERBATIM)
  set(STRATA_SPVS ${STRATA_SPVS} "${name}=${spv}" PARENT_SCOPE)
  set(STRATA_SPV_FILES ${STRATA_SPV_FILES} ${spv} PARENT_SCOPE)
endfunction()

# The weight formats, in vulkan/vk_formats.h's order (WeightFormat).
set(STRATA_WEIGHT_FORMATS f32 bf16 f16 f8_e4m3 i8_row i4_group mxfp4_split q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k
    q5_k q6_k mxfp4)
set(fmt 0)
foreach(f IN LISTS STRATA_WEIGHT_FORMATS)
  strata_shader(linear_${f} linear.comp -DFMT=${fmt})
  strata_shader(linear1_${f} linear.comp -DFMT=${fmt} -DROWS=1)
  strata_shader(linear_row_${f} linear_row.comp -DFMT=${fmt})
  strata_shader(linear_row_spread_${f} linear_row.comp -DFMT=${fmt} -DSPREAD)
  strata_shader(linear_grouped_${f} linear.comp -DFMT=${fmt} -DGROUPED)
  strata_shader(linear_mm_${f} linear_mm.comp -DFMT=${fmt})
  strata_shader(linear_mm_grouped_${f} linear_mm.comp -DFMT=${fmt} -DGROUPED)
  strata_shader(embed_${f} embed.comp -DFMT=${fmt})
  strata_shader(linear_t_${f} linear_t.comp -DFMT=${fmt})
  math(EXPR fmt "${fmt} + 1")
endforeach()
# The CPU kernels' interleaved layouts (packs store experts so): products only.
foreach(f IN ITEMS il_q8_0 il_mxfp4 il_q4_k)
  strata_shader(linear_${f} linear_il.comp -DFMT=${fmt})
  strata_shader(linear_grouped_${f} linear_il.comp -DFMT=${fmt} -DGROUPED)
  strata_shader(linear_mm_${f} linear_il_mm.comp -DFMT=${fmt})
  strata_shader(linear_mm_grouped_${f} linear_il_mm.comp -DFMT=${fmt} -DGROUPED)
  math(EXPR fmt "${fmt} + 1")
endforeach()
# Routing that also writes the jobs of a layer the device holds whole.
strata_shader(route_held route.comp -DHELD)
# A MoE layer's combine and the add_rms_norm of its output in one dispatch.
strata_shader(combine_norm rms_norm.comp -DCOMBINE)
# Decode steps' attention scores that prep the heads themselves.
strata_shader(gqa_row_scores_prep gqa_row_scores.comp -DPREP)
strata_shader(mla_row_scores_prep mla_row_scores.comp -DPREP)
# A row's softmax and values for heads of up to 512 channels (MLA's latents).
strata_shader(attend_row_wide attend_row.comp -DWIDE)
file(GLOB plain_shaders CONFIGURE_DEPENDS ${STRATA_SHADER_DIR}/*.comp)
foreach(path IN LISTS plain_shaders)
  get_filename_component(name ${path} NAME_WE)
  if(NOT name MATCHES "^(linear|linear_row|linear_t|linear_il|linear_mm|linear_il_mm|embed)$")
    strata_shader(${name} ${name}.comp)
  endif()
endforeach()

set(shaders_cpp ${PROJECT_BINARY_DIR}/generated/vk_shaders.cpp)
list(JOIN STRATA_SPVS "," spv_arg)
add_custom_command(OUTPUT ${shaders_cpp}
  COMMAND ${CMAKE_COMMAND} -DOUT=${shaders_cpp} "-DSPVS=${spv_arg}" -P ${PROJECT_SOURCE_DIR}/cmake/embed_spirv.cmake
  DEPENDS ${STRATA_SPV_FILES} ${PROJECT_SOURCE_DIR}/cmake/embed_spirv.cmake
  COMMENT "Embedding the SPIR-V shaders")
target_sources(strata_vulkan PRIVATE ${shaders_cpp})
