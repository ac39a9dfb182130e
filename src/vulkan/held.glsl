// What held_jobs.comp and held_groups.comp share: the layer's table of
// expert WeightRefs (per expert: gate, up, down, gate_up; as words), a job
// written from it (jobs.glsl's Job, as words), and a slot's entry in the
// combine's order.
#define REF_WORDS 20u            // vk_formats.h's WeightRef
#define JOB_WORDS 26u            // jobs.glsl's Job
#define EXPERT_WORDS (4u * REF_WORDS)

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Table { uint v[]; };

// Job `job` of `jobs`: the WeightRef at word ref_at of the table, x, y, rows.
void put_job(Uints jobs, uint job, Table table, uint ref_at, uvec2 x, uvec2 y, uint rows) {
  const uint at = job * JOB_WORDS;
  for (uint i = 0; i < REF_WORDS; ++i) jobs.v[at + i] = table.v[ref_at + i];
  jobs.v[at + REF_WORDS + 0u] = x.x;
  jobs.v[at + REF_WORDS + 1u] = x.y;
  jobs.v[at + REF_WORDS + 2u] = y.x;
  jobs.v[at + REF_WORDS + 3u] = y.y;
  jobs.v[at + REF_WORDS + 4u] = rows;
  jobs.v[at + REF_WORDS + 5u] = 0u;
}

// An expert's first and second jobs (`job` of each list), `rows` rows at
// place `at` of the scratch: separate gate/up: first jobs 2·job = (gate, x,
// gate part), 2·job + 1 = (up, x, up part); fused: first job `job` =
// (gate_up, x, gate_up part, twice as wide); second job `job` = (down, gate
// part, down_y). The scratch's parts are `part` bytes, places `width`
// floats; `base`: the expert's first word in the table.
void put_expert_jobs(Uints first, Uints second, Table table, uint job, uint base, uvec2 x, uvec2 scratch, uint part,
                     uint at, uint width, uvec2 down_y, uint rows, bool fused) {
  const uvec2 gate = address_plus(scratch, at * width * 4u);
  if (fused) {
    put_job(first, job, table, base + 3u * REF_WORDS, x, address_plus(scratch, 2u * part + 2u * at * width * 4u), rows);
  } else {
    put_job(first, 2u * job, table, base, x, gate, rows);
    put_job(first, 2u * job + 1u, table, base + REF_WORDS, x, address_plus(scratch, part + at * width * 4u), rows);
  }
  put_job(second, job, table, base + 2u * REF_WORDS, gate, down_y, rows);
}

// Slot q (= r·k + s) in the combine's order: its place among row r's slots
// by (id, slot), the order of a sort by id (ids within a row are distinct),
// gets `ys_row` (where its expert output lies) and its weight; and the id
// and weight go to `host` (ids, then weights, `slots` each) where given.
void put_order(Ints ids, Floats weights, uint k, uint slots, uint q, uint ys_row, Uints slot_rows, Floats sorted,
               Uints host) {
  const uint e = uint(ids.v[q]), r = q / k;
  uint rank = 0u;
  for (uint s = 0; s < k; ++s) {
    const uint other = uint(ids.v[r * k + s]);
    if (other < e || (other == e && r * k + s < q)) ++rank;
  }
  slot_rows.v[r * k + rank] = ys_row;
  sorted.v[r * k + rank] = weights.v[q];
  if (uvec2(host) != uvec2(0u)) {
    host.v[q] = uint(ids.v[q]);
    host.v[slots + q] = floatBitsToUint(weights.v[q]);
  }
}
