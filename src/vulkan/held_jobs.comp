#version 450
// The routed experts' jobs of a layer whose experts all live in the device's
// expert cache, made on the device from route.comp's choice, so the host
// never waits for it (VulkanBackend::route_held). For slot q = r·k + s (row
// r's s-th choice, expert e = ids[q]), from the layer's table of WeightRefs
// (per expert: gate, up, down, gate_up; jobs.glsl's layout, as words):
//   first products  separate gate/up: job 2q = (gate of e, x row r, gate
//                   scratch row q), job 2q + 1 = (up of e, x row r, up
//                   scratch row q); fused: job q = (gate_up of e, x row r,
//                   gate_up scratch row q, twice as wide);
//   down products   job q = (down of e, gate scratch row q, ys row q);
//   combine         row r's slots sorted by expert id (slot_rows = q, with
//                   its weight), as VulkanBackend::combine_experts sorts them.
// Every job has one row: a product's rows are computed each alone, so this is
// the bits of the host's grouping by expert. The ids and weights are also
// written to `host` (host-visible memory the backend reads after the next
// finish), where given.
#include "common.glsl"

layout(local_size_x = 64) in;

#define REF_WORDS 20u            // vk_formats.h's WeightRef
#define JOB_WORDS 26u            // jobs.glsl's Job
#define EXPERT_WORDS (4u * REF_WORDS)

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Table { uint v[]; };

layout(push_constant) uniform Push {
  Ints ids;         // [n × k], route.comp's
  Floats weights;   // [n × k]
  Table table;      // [experts × EXPERT_WORDS]
  Uints first;      // jobs, [2·n·k] (fused: [n·k])
  Uints second;     // jobs, [n·k]
  Uints slot_rows;  // [n × k], sorted by id within a row
  Floats sorted;    // their weights
  uvec2 x;          // the experts' input, rows x_width floats apart
  uvec2 scratch;    // gate rows, then up rows (fused: then gate_up rows), width floats each, n·k of each
  uvec2 ys;         // the down products' rows, hidden floats apart
  Uints host;       // ids, then weights, [n × k] each; 0: none
  uint n, k, width, x_width, hidden, fused;
} p;

void put_job(Uints jobs, uint job, uint ref_at, uvec2 x, uvec2 y) {
  const uint at = job * JOB_WORDS;
  for (uint i = 0; i < REF_WORDS; ++i) jobs.v[at + i] = p.table.v[ref_at + i];
  jobs.v[at + REF_WORDS + 0u] = x.x;
  jobs.v[at + REF_WORDS + 1u] = x.y;
  jobs.v[at + REF_WORDS + 2u] = y.x;
  jobs.v[at + REF_WORDS + 3u] = y.y;
  jobs.v[at + REF_WORDS + 4u] = 1u;  // n
  jobs.v[at + REF_WORDS + 5u] = 0u;
}

void main() {
  const uint t = gl_LocalInvocationID.x, slots = p.n * p.k;
  const uint ref_gate = 0u, ref_up = REF_WORDS, ref_down = 2u * REF_WORDS, ref_gate_up = 3u * REF_WORDS;
  const uint part = slots * p.width * 4u;  // bytes of one scratch part
  for (uint q = t; q < slots; q += 64u) {
    const uint e = uint(p.ids.v[q]), r = q / p.k, base = e * EXPERT_WORDS;
    const uvec2 x = address_plus(p.x, r * p.x_width * 4u);
    const uvec2 gate = address_plus(p.scratch, q * p.width * 4u);
    if (p.fused != 0u) {
      put_job(p.first, q, base + ref_gate_up, x, address_plus(p.scratch, 2u * part + 2u * q * p.width * 4u));
    } else {
      put_job(p.first, 2u * q, base + ref_gate, x, gate);
      put_job(p.first, 2u * q + 1u, base + ref_up, x, address_plus(p.scratch, part + q * p.width * 4u));
    }
    put_job(p.second, q, base + ref_down, gate, address_plus(p.ys, q * p.hidden * 4u));
    // Its place among its row's slots by (id, slot): ids within a row are
    // distinct, so this is the order of a sort by id.
    uint place = 0u;
    for (uint s = 0; s < p.k; ++s) {
      const uint other = uint(p.ids.v[r * p.k + s]);
      if (other < e || (other == e && r * p.k + s < q)) ++place;
    }
    p.slot_rows.v[r * p.k + place] = q;
    p.sorted.v[r * p.k + place] = p.weights.v[q];
    if (uvec2(p.host) != uvec2(0u)) {
      p.host.v[q] = uint(p.ids.v[q]);
      p.host.v[slots + q] = floatBitsToUint(p.weights.v[q]);
    }
  }
}
