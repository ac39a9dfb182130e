// What route.comp's HELD build (route_held) and held_groups.comp share: the
// layer's table of expert WeightRefs (per expert: gate, up, down, gate_up; as
// words), a job written from it (jobs.glsl's Job, as words), and a slot's
// entry in the combine's order.
#define REF_WORDS 20u            // vk_formats.h's WeightRef
#define JOB_WORDS 26u            // jobs.glsl's Job
#define EXPERT_WORDS (4u * REF_WORDS)

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Table { uint v[]; };

// A WeightRef of the table (word ref_at on), loaded whole before any job
// is written: a job's stores between its loads would make each load wait on
// device memory in turn (the compiler cannot know the table and the jobs
// apart).
struct Ref {
  uint w[REF_WORDS];
};

Ref load_ref(Table table, uint ref_at) {
  Ref r;
  [[unroll]] for (uint i = 0; i < REF_WORDS; ++i) r.w[i] = table.v[ref_at + i];
  return r;
}

// Job `job` of `jobs`: the WeightRef `ref`, x, y, rows.
void put_job(Uints jobs, uint job, Ref ref, uvec2 x, uvec2 y, uint rows) {
  const uint at = job * JOB_WORDS;
  [[unroll]] for (uint i = 0; i < REF_WORDS; ++i) jobs.v[at + i] = ref.w[i];
  jobs.v[at + REF_WORDS + 0u] = x.x;
  jobs.v[at + REF_WORDS + 1u] = x.y;
  jobs.v[at + REF_WORDS + 2u] = y.x;
  jobs.v[at + REF_WORDS + 3u] = y.y;
  jobs.v[at + REF_WORDS + 4u] = rows;
  jobs.v[at + REF_WORDS + 5u] = 0u;
}

// How an expert's gate and up are multiplied: two products; one (gate_up),
// its output split before the down product; one, the down product reading
// its output's (gate, up) pairs itself (linear.comp's x_at()).
#define GATE_UP_APART 0u
#define GATE_UP_FUSED 1u
#define GATE_UP_PAIRS 2u

// An expert's first and second jobs (`job` of each list), `rows` rows at
// place `at` of the scratch: separate gate/up: first jobs 2·job = (gate, x,
// gate part), 2·job + 1 = (up, x, up part); fused: first job `job` =
// (gate_up, x, gate_up part, twice as wide); second job `job` = (down, gate
// part, down_y), or (down, gate_up part, down_y) for GATE_UP_PAIRS. The
// scratch's parts are `part` bytes, places `width` floats; `base`: the
// expert's first word in the table.
void put_expert_jobs(Uints first, Uints second, Table table, uint job, uint base, uvec2 x, uvec2 scratch, uint part,
                     uint at, uint width, uvec2 down_y, uint rows, uint gate_up) {
  const uvec2 gate = address_plus(scratch, at * width * 4u);
  const uvec2 pairs = address_plus(scratch, 2u * part + 2u * at * width * 4u);
  const bool apart = gate_up == GATE_UP_APART;
  const Ref a = load_ref(table, apart ? base : base + 3u * REF_WORDS), down = load_ref(table, base + 2u * REF_WORDS);
  Ref b;
  if (apart) b = load_ref(table, base + REF_WORDS);
  if (!apart) {
    put_job(first, job, a, x, pairs, rows);
  } else {
    put_job(first, 2u * job, a, x, gate, rows);
    put_job(first, 2u * job + 1u, b, x, address_plus(scratch, part + at * width * 4u), rows);
  }
  put_job(second, job, down, gate_up == GATE_UP_PAIRS ? pairs : gate, down_y, rows);
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

// What a step of few rows needs for its jobs (VulkanBackend::route_held
// writes it with the step's arguments; its layout there).
layout(buffer_reference, std430, buffer_reference_align = 8) buffer HeldArgs {
  Table table;      // [experts × EXPERT_WORDS]
  Uints first;      // jobs, [2·n·k] (fused: [n·k])
  Uints second;     // jobs, [n·k]
  Uints slot_rows;  // [n × k], sorted by id within a row
  Floats sorted;    // their weights
  uvec2 x;          // the experts' input, rows row_width floats apart
  uvec2 scratch;    // gate rows, then up rows (fused: then gate_up rows), width floats each, n·k of each
  uvec2 ys;         // the down products' rows, row_width floats apart
  Uints host;       // ids, then weights, [n × k] each; 0: none
  uint n, width, row_width, fused;  // fused: put_expert_jobs()'s GATE_UP_*; width: an expert's gate (= up); row_width: its input's and output's
};

// Slot q = r·k + s's jobs (row r's s-th choice, expert e = ids[q]), each of
// one row, from the layer's table:
//   first products  separate gate/up: job 2q = (gate of e, x row r, gate
//                   scratch row q), job 2q + 1 = (up of e, x row r, up
//                   scratch row q); fused: job q = (gate_up of e, x row r,
//                   gate_up scratch row q, twice as wide);
//   down products   job q = (down of e, gate scratch row q, ys row q);
//   combine         row r's slots sorted by expert id (slot_rows = q, with
//                   its weight), as VulkanBackend::combine_experts sorts them.
// A product's rows are computed each alone, so this is the bits of the
// host's grouping by expert. The ids and weights also go to `host`
// (host-visible memory the backend reads after the next finish), where given.
// Row r's ids and weights must be written and seen (sync_workgroup).
void put_slot_jobs(HeldArgs a, Ints ids, Floats weights, uint k, uint q) {
  const uint slots = a.n * k, e = uint(ids.v[q]), r = q / k;
  const uint part = slots * a.width * 4u;  // bytes of one scratch part
  put_expert_jobs(a.first, a.second, a.table, q, e * EXPERT_WORDS, address_plus(a.x, r * a.row_width * 4u), a.scratch,
                  part, q, a.width, address_plus(a.ys, q * a.row_width * 4u), 1u, a.fused);
  put_order(ids, weights, k, slots, q, q, a.slot_rows, a.sorted, a.host);
}
