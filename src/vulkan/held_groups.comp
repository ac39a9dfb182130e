#version 450
// route_held's counterpart (route.comp's HELD build) for steps of many rows
// (a prompt): the jobs
// of a held layer grouped by expert, made on the device from route.comp's
// choice, as the host groups them (MoeBlock::forward): expert e's slots
// (q = r·k + s with ids[q] = e, in increasing q) take places
// offset[e] .. offset[e] + count[e] of the expert order, experts in
// increasing id. Written:
//   gather      [n·k]: the x row of each place (gather_rows.comp's list;
//               `lists`, then each slot's place and each expert's count)
//   first jobs  separate gate/up: job 2e = (gate of e, x places of e, gate
//               scratch places of e), job 2e + 1 likewise for up; fused:
//               job e = (gate_up of e, ..., gate_up scratch, twice as wide);
//               count[e] rows each (none: the job does nothing)
//   second jobs job e = (down of e, gate scratch places, ys places)
//   combine     row r's slots sorted by expert id (slot_rows: the places,
//               with their weights), as combine_experts sorts them
// and the ids and weights to `host` where given. A product's rows are each
// computed alone, so this is the bits of the host's grouping.
//
// Three dispatches (push `step`), each from the one before's results:
//   0 count  a workgroup an expert: count[e], the matches summed (integers:
//            any order gives the same)
//   1 place  a workgroup an expert: offset[e] = the counts before it; the
//            invocations take contiguous runs of slots, so their matches
//            are placed in increasing q; invocation 0 writes e's jobs
//   2 order  an invocation a slot: its rank in its row, the combine's order;
//            invocation 0 writes the products' grids after the counts
//            (x, y, z: first, then down), y sized by the most rows any
//            expert got (a job's rows past it would do nothing)
#include "common.glsl"

layout(local_size_x = 256) in;

#include "held.glsl"

layout(push_constant) uniform Push {
  Ints ids;         // [n × k], route.comp's
  Floats weights;   // [n × k]
  Table table;      // [experts × EXPERT_WORDS]
  Uints first;      // jobs, [2·experts] (fused: [experts])
  Uints second;     // jobs, [experts]
  Uints slot_rows;  // [n × k], sorted by id within a row
  Floats sorted;    // their weights
  Uints lists;      // the gather list [n·k], each slot's place [n·k], each expert's count [experts], the grids [6]
  uvec2 xs;         // the gathered inputs, x_width floats a place (the down products write here too)
  uvec2 scratch;    // gate places, then up places (fused: then gate_up places), width floats each
  Uints host;       // ids, then weights, [n × k] each; 0: none
  uint n, k, experts, width, x_width, fused, step;  // fused: held.glsl's GATE_UP_*
  uint groups;  // the products' workgroups across their outputs: first | down << 16
  uint tiles;   // the rows a workgroup of them takes: first | down << 16
} p;

shared uint sums[256];

// The sum of every invocation's v (a fixed tree; integers in any case).
uint workgroup_sum(uint v) {
  const uint t = gl_LocalInvocationID.x;
  sums[t] = v;
  barrier();
  for (uint w = 128u; w >= 1u; w /= 2u) {
    if (t < w) sums[t] += sums[t + w];
    barrier();
  }
  const uint total = sums[0];
  barrier();
  return total;
}

void main() {
  const uint t = gl_LocalInvocationID.x, slots = p.n * p.k, e = gl_WorkGroupID.x;
  if (p.step == 0u) {
    uint c = 0u;
    for (uint q = t; q < slots; q += 256u) c += uint(p.ids.v[q]) == e ? 1u : 0u;
    const uint total = workgroup_sum(c);
    if (t == 0u) p.lists.v[2u * slots + e] = total;
    return;
  }
  if (p.step == 1u) {
    uint before = 0u;
    for (uint f = t; f < e; f += 256u) before += p.lists.v[2u * slots + f];
    const uint o = workgroup_sum(before);
    // Invocation t's run of slots and its matches, placed after those of
    // the runs before it (their exclusive sum, by one invocation).
    const uint run = (slots + 255u) / 256u, q0 = min(t * run, slots), q1 = min(q0 + run, slots);
    uint mine = 0u;
    for (uint q = q0; q < q1; ++q) mine += uint(p.ids.v[q]) == e ? 1u : 0u;
    sums[t] = mine;
    barrier();
    if (t == 0u) {
      uint acc = 0u;
      for (uint i = 0u; i < 256u; ++i) {
        const uint m = sums[i];
        sums[i] = acc;
        acc += m;
      }
    }
    barrier();
    uint at = o + sums[t];
    for (uint q = q0; q < q1; ++q)
      if (uint(p.ids.v[q]) == e) {
        p.lists.v[slots + q] = at;
        p.lists.v[at] = q / p.k;
        ++at;
      }
    if (t != 0u) return;
    const uint rows = p.lists.v[2u * slots + e], part = slots * p.width * 4u;  // bytes of one scratch part
    const uvec2 x = address_plus(p.xs, o * p.x_width * 4u);
    put_expert_jobs(p.first, p.second, p.table, e, e * EXPERT_WORDS, x, p.scratch, part, o, p.width, x, rows,
                    p.fused);
    return;
  }
  // The combine's order, and the grids.
  const uint q = gl_GlobalInvocationID.x;
  if (q == 0u) {
    uint most = 0u;
    for (uint f = 0u; f < p.experts; ++f) most = max(most, p.lists.v[2u * slots + f]);
    const uint at = 2u * slots + p.experts, t_first = p.tiles & 0xFFFFu, t_down = p.tiles >> 16;
    p.lists.v[at] = p.groups & 0xFFFFu;
    p.lists.v[at + 1u] = (most + t_first - 1u) / t_first;
    p.lists.v[at + 2u] = p.fused != 0u ? p.experts : 2u * p.experts;
    p.lists.v[at + 3u] = p.groups >> 16;
    p.lists.v[at + 4u] = (most + t_down - 1u) / t_down;
    p.lists.v[at + 5u] = p.experts;
  }
  if (q < slots) put_order(p.ids, p.weights, p.k, slots, q, p.lists.v[slots + q], p.slot_rows, p.sorted, p.host);
}
