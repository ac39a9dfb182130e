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

#include "held.glsl"

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

void main() {
  const uint t = gl_LocalInvocationID.x, slots = p.n * p.k;
  const uint part = slots * p.width * 4u;  // bytes of one scratch part
  for (uint q = t; q < slots; q += 64u) {
    const uint e = uint(p.ids.v[q]), r = q / p.k;
    put_expert_jobs(p.first, p.second, p.table, q, e * EXPERT_WORDS, address_plus(p.x, r * p.x_width * 4u), p.scratch,
                    part, q, p.width, address_plus(p.ys, q * p.hidden * 4u), 1u, p.fused != 0u);
    put_order(p.ids, p.weights, p.k, slots, q, q, p.slot_rows, p.sorted, p.host);
  }
}
