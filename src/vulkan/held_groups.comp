#version 450
// held_jobs.comp's counterpart for steps of many rows (a prompt): the jobs
// of a held layer grouped by expert, made on the device from route.comp's
// choice, as the host groups them (MoeBlock::forward): expert e's slots
// (q = r·k + s with ids[q] = e, in increasing q) take places
// offset[e] .. offset[e] + count[e] of the expert order, experts in
// increasing id. Written:
//   gather      [n·k]: the x row of each place (gather_rows.comp's list)
//   first jobs  separate gate/up: job 2e = (gate of e, x places of e, gate
//               scratch places of e), job 2e + 1 likewise for up; fused:
//               job e = (gate_up of e, ..., gate_up scratch, twice as wide);
//               count[e] rows each (none: the job does nothing)
//   second jobs job e = (down of e, gate scratch places, ys places)
//   combine     row r's slots sorted by expert id (slot_rows: the places,
//               with their weights), as combine_experts sorts them
// and the ids and weights to `host` where given. A product's rows are each
// computed alone, so this is the bits of the host's grouping. One
// workgroup: experts are counted and placed one invocation an expert.
#include "common.glsl"

layout(local_size_x = 256) in;

#define REF_WORDS 20u            // vk_formats.h's WeightRef
#define JOB_WORDS 26u            // jobs.glsl's Job
#define EXPERT_WORDS (4u * REF_WORDS)
#define MAX_EXPERTS 1024u

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Table { uint v[]; };

layout(push_constant) uniform Push {
  Ints ids;         // [n × k], route.comp's
  Floats weights;   // [n × k]
  Table table;      // [experts × EXPERT_WORDS]
  Uints first;      // jobs, [2·experts] (fused: [experts])
  Uints second;     // jobs, [experts]
  Uints slot_rows;  // [n × k], sorted by id within a row
  Floats sorted;    // their weights
  Uints gather;     // [n × k]
  Uints place;      // [n × k]: each slot's place
  uvec2 xs;         // the gathered inputs, x_width floats a place (the down products write here too)
  uvec2 scratch;    // gate places, then up places (fused: then gate_up places), width floats each
  Uints host;       // ids, then weights, [n × k] each; 0: none
  uint n, k, experts, width, x_width, fused;
} p;

shared uint offset[MAX_EXPERTS + 1u];

void put_job(Uints jobs, uint job, uint ref_at, uvec2 x, uvec2 y, uint rows) {
  const uint at = job * JOB_WORDS;
  for (uint i = 0; i < REF_WORDS; ++i) jobs.v[at + i] = p.table.v[ref_at + i];
  jobs.v[at + REF_WORDS + 0u] = x.x;
  jobs.v[at + REF_WORDS + 1u] = x.y;
  jobs.v[at + REF_WORDS + 2u] = y.x;
  jobs.v[at + REF_WORDS + 3u] = y.y;
  jobs.v[at + REF_WORDS + 4u] = rows;
  jobs.v[at + REF_WORDS + 5u] = 0u;
}

void main() {
  const uint t = gl_LocalInvocationID.x, slots = p.n * p.k, E = p.experts;
  // Each expert's count, then their running sum (offset[e] = the places before e).
  for (uint e = t; e < E; e += 256u) {
    uint c = 0u;
    for (uint q = 0; q < slots; ++q) c += uint(p.ids.v[q]) == e ? 1u : 0u;
    offset[e + 1u] = c;
  }
  barrier();
  if (t == 0u) {
    offset[0] = 0u;
    for (uint e = 1u; e <= E; ++e) offset[e] += offset[e - 1u];
  }
  barrier();
  // Places, the gather list and the jobs, an expert at a time.
  const uint part = slots * p.width * 4u;  // bytes of one scratch part
  for (uint e = t; e < E; e += 256u) {
    uint at = offset[e];
    for (uint q = 0; q < slots; ++q)
      if (uint(p.ids.v[q]) == e) {
        p.place.v[q] = at;
        p.gather.v[at] = q / p.k;
        ++at;
      }
    const uint o = offset[e], rows = offset[e + 1u] - o, base = e * EXPERT_WORDS;
    const uvec2 x = address_plus(p.xs, o * p.x_width * 4u);
    const uvec2 gate = address_plus(p.scratch, o * p.width * 4u);
    if (p.fused != 0u) {
      put_job(p.first, e, base + 3u * REF_WORDS, x, address_plus(p.scratch, 2u * part + 2u * o * p.width * 4u), rows);
    } else {
      put_job(p.first, 2u * e, base, x, gate, rows);
      put_job(p.first, 2u * e + 1u, base + REF_WORDS, x, address_plus(p.scratch, part + o * p.width * 4u), rows);
    }
    put_job(p.second, e, base + 2u * REF_WORDS, gate, x, rows);
  }
  sync_workgroup();
  // The combine's order: a slot's place among its row's slots by (id, slot).
  for (uint q = t; q < slots; q += 256u) {
    const uint e = uint(p.ids.v[q]), r = q / p.k;
    uint rank = 0u;
    for (uint s = 0; s < p.k; ++s) {
      const uint other = uint(p.ids.v[r * p.k + s]);
      if (other < e || (other == e && r * p.k + s < q)) ++rank;
    }
    p.slot_rows.v[r * p.k + rank] = p.place.v[q];
    p.sorted.v[r * p.k + rank] = p.weights.v[q];
    if (uvec2(p.host) != uvec2(0u)) {
      p.host.v[q] = uint(p.ids.v[q]);
      p.host.v[slots + q] = floatBitsToUint(p.weights.v[q]);
    }
  }
}
