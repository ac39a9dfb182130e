// The grouped products' list (linear.comp and linear_il.comp built with
// -DGROUPED; vk_backend_experts.cpp fills it as struct ProductJob).
// Many products in one dispatch (a layer's routed experts, kernels of one
// format): job gl_WorkGroupID.z has its own matrix, input and output, rows
// of x and y contiguous; workgroups past a job's outputs or rows do nothing.
// Each (job, row, output) is computed exactly as the single product would.
struct Job {
  WeightRef w;
  Floats x;
  Floats y;
  uint n, pad;
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Jobs { Job v[]; };
