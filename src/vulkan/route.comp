#version 450
// Routing (backend.h RouteSpec; backend/host_routing.h's order) for one row
// per workgroup of 64, ids and weights written where the host (or later ops)
// read them:
//   SigmoidGroup: score = sigmoid(logit), choice = score + bias; with groups,
//     a group's score is the sum of its two best choices, the topk_groups best
//     groups stay and the others' choices become -inf; the k best choices;
//     weights = their scores, summed in order (+ 1e-20) and divided by the sum
//     when normalizing, then times scale.
//   Softmax: probabilities (max, e^(x - max), a fixed tree's sum, times its
//     inverse); the k most probable; weights = theirs, divided by their sum
//     (in order) when normalizing.
//   TopkSoftmax: the k largest logits; weights = the softmax of those k.
// Every choice is the largest value not yet taken, ties to the lower index.
// Each row alone, in a fixed order: a row's routing does not depend on the
// others in its batch. Built with HELD (route_held), a row's workgroup then
// writes the row's expert jobs for a layer the device holds whole, as
// held.glsl's put_slot_jobs says: the routing and the jobs in one dispatch. exp(), and so sigmoid and the probabilities, are the
// GPU's: weights may differ from the host's in the last places, and so may a
// choice between experts whose scores are that close (the CPU's choice from
// the same logits otherwise).
#include "common.glsl"

layout(local_size_x = 64) in;

#ifdef HELD
#include "held.glsl"
#endif

#define MAX_EXPERTS 1024u
#define MAX_K 64u
#define MAX_GROUPS 64u
#define NONE 0xFFFFFFFFu
#define RANKED 256u  // the most experts chosen by rank (E·E/64 comparisons an invocation)

layout(push_constant) uniform Push {
  Floats logits;   // n × experts
  Floats bias;     // SigmoidGroup's, experts values
  Ints ids;        // n × k
  Floats weights;  // n × k
  uint experts, k, groups, topk_groups;
  uint kind;  // 0 SigmoidGroup, 1 Softmax, 2 TopkSoftmax (RouteSpec::Kind)
  uint normalize;
  float scale;
#ifdef HELD
  HeldArgs held;   // the layer's, for its jobs (route_held)
#endif
} p;

shared float value[MAX_EXPERTS];   // what the weights are taken from
shared float choice[MAX_EXPERTS];  // what the choice is made on
shared uint taken[MAX_EXPERTS];
shared float best_value[64];
shared uint best_index[64];
shared uint chosen[MAX_K];
shared uint any_nan;
shared float group_score[MAX_GROUPS];
shared uint keep_group[MAX_GROUPS];

// Whether (v, i) comes before (bv, bi) in the choice order.
bool before(float v, uint i, float bv, uint bi) {
  if (i == NONE) return false;
  if (bi == NONE) return true;
  return v > bv || (v == bv && i < bi);
}

// The first of choice[] in that order not yet taken, by all 64 invocations.
uint first_untaken(uint n) {
  const uint t = gl_LocalInvocationID.x;
  float bv = 0.0;
  uint bi = NONE;
  for (uint e = t; e < n; e += 64u)
    if (taken[e] == 0u && before(choice[e], e, bv, bi)) {
      bv = choice[e];
      bi = e;
    }
  best_value[t] = bv;
  best_index[t] = bi;
  barrier();
  for (uint w = 32u; w >= 1u; w /= 2u) {
    if (t < w && before(best_value[t + w], best_index[t + w], best_value[t], best_index[t])) {
      best_value[t] = best_value[t + w];
      best_index[t] = best_index[t + w];
    }
    barrier();
  }
  const uint found = best_index[0];
  barrier();
  return found;
}

// A fixed tree over the 64 invocations' partials (max when take_max, else the sum).
float fold64(float v, bool take_max) {
  const uint t = gl_LocalInvocationID.x;
  best_value[t] = v;
  barrier();
  for (uint w = 32u; w >= 1u; w /= 2u) {
    if (t < w) {
      precise float s = take_max ? max(best_value[t], best_value[t + w]) : best_value[t] + best_value[t + w];
      best_value[t] = s;
    }
    barrier();
  }
  const float total = best_value[0];
  barrier();
  return total;
}

void write_choice(uint at);

void main() {
  const uint r = gl_WorkGroupID.x, t = gl_LocalInvocationID.x, E = p.experts, K = p.k;
  const uint row = r * E;
  // An invocation's logits (and biases) loaded together before any is used:
  // up to MAX_EXPERTS / 64 of them, one wait on device memory, not one each.
  float logits[MAX_EXPERTS / 64u], biases[MAX_EXPERTS / 64u];
  [[unroll]] for (uint u = 0; u < MAX_EXPERTS / 64u; ++u) {
    const uint e = t + 64u * u;
    logits[u] = e < E ? p.logits.v[row + e] : 0.0;
    biases[u] = e < E && p.kind == 0u ? p.bias.v[e] : 0.0;
  }
  [[unroll]] for (uint u = 0; u < MAX_EXPERTS / 64u; ++u) {
    const uint e = t + 64u * u;
    if (e >= E) continue;
    taken[e] = 0u;
    if (p.kind == 0u) {
      const float s = sigmoid(logits[u]);
      precise float c = s + biases[u];
      value[e] = s;
      choice[e] = c;
    } else {
      value[e] = logits[u];
      choice[e] = logits[u];
    }
  }
  barrier();
  if (p.kind == 1u) {
    float m = -3.402823466e38;
    for (uint e = t; e < E; e += 64u) m = max(m, value[e]);
    m = fold64(m, true);
    precise float part = 0.0;
    for (uint e = t; e < E; e += 64u) {
      precise float x = exp(value[e] - m);
      value[e] = x;
      part = part + x;
    }
    precise float inv = 1.0 / fold64(part, false);
    for (uint e = t; e < E; e += 64u) {
      precise float x = value[e] * inv;
      value[e] = x;
      choice[e] = x;
    }
    barrier();
  }
  if (p.kind == 0u && p.groups > 1u) {
    const uint G = p.groups, per = E / G;
    if (t < G) {
      uint b0 = NONE, b1 = NONE;
      float v0 = 0.0, v1 = 0.0;
      for (uint e = t * per; e < (t + 1u) * per; ++e) {
        if (before(choice[e], e, v0, b0)) {
          v1 = v0;
          b1 = b0;
          v0 = choice[e];
          b0 = e;
        } else if (before(choice[e], e, v1, b1)) {
          v1 = choice[e];
          b1 = e;
        }
      }
      precise float g = v0 + v1;
      group_score[t] = g;
      keep_group[t] = 0u;
    }
    barrier();
    if (t == 0u)
      for (uint j = 0; j < p.topk_groups; ++j) {
        uint bi = NONE;
        float bv = 0.0;
        for (uint g = 0; g < G; ++g)
          if (keep_group[g] == 0u && before(group_score[g], g, bv, bi)) {
            bv = group_score[g];
            bi = g;
          }
        keep_group[bi] = 1u;
      }
    barrier();
    for (uint e = t; e < E; e += 64u)
      if (keep_group[e / per] == 0u) choice[e] = uintBitsToFloat(0xFF800000u);  // -inf
    barrier();
  }
  // Without NaN the choice order is total (larger, then the lower index),
  // so the k best are the experts of rank 0 .. k-1: up to RANKED experts
  // each invocation counts the experts before its own (no barriers); else,
  // or with a NaN (no order: the choices then follow the scan below), k
  // rounds of taking the first untaken, a workgroup's tree each.
  if (t == 0u) any_nan = 0u;
  barrier();
  for (uint e = t; e < E; e += 64u)
    if (isnan(choice[e]) || (floatBitsToUint(choice[e]) & 0x7FFFFFFFu) > 0x7F800000u) any_nan = 1u;
  barrier();
  if (any_nan == 0u && E <= RANKED) {
    for (uint e = t; e < E; e += 64u) {
      const float v = choice[e];
      uint rank = 0u;
      for (uint f = 0u; f < E; ++f) rank += before(choice[f], f, v, e) ? 1u : 0u;
      if (rank < K) chosen[rank] = e;
    }
    barrier();
  } else {
    for (uint j = 0; j < K; ++j) {
      const uint id = first_untaken(E);
      if (t == 0u) {
        chosen[j] = id;
        taken[id] = 1u;
      }
      barrier();
    }
  }
  if (t == 0u) write_choice(r * K);
#ifdef HELD
  // The row's jobs from the choice just written (held.glsl): an invocation a slot.
  sync_workgroup();
  if (t < K) put_slot_jobs(p.held, p.ids, p.weights, K, r * K + t);
#endif
}

// The row's ids and weights from chosen[] (at: its first slot), by one invocation.
void write_choice(uint at) {
  const uint K = p.k;
  if (p.kind == 2u) {
    float m = value[chosen[0]];
    for (uint j = 1; j < K; ++j) m = max(m, value[chosen[j]]);
    precise float sum = 0.0;
    for (uint j = 0; j < K; ++j) {
      precise float x = exp(value[chosen[j]] - m);
      p.weights.v[at + j] = x;
      sum = sum + x;
    }
    precise float inv = 1.0 / sum;
    for (uint j = 0; j < K; ++j) {
      precise float x = p.weights.v[at + j] * inv;
      p.weights.v[at + j] = x;
      p.ids.v[at + j] = int(chosen[j]);
    }
    return;
  }
  precise float sum = 0.0;
  for (uint j = 0; j < K; ++j) sum = sum + value[chosen[j]];
  precise float denom = p.kind == 0u ? sum + 1e-20 : sum;
  for (uint j = 0; j < K; ++j) {
    precise float w = value[chosen[j]];
    if (p.normalize != 0u) w = w / denom;
    if (p.kind == 0u) w = w * p.scale;
    p.weights.v[at + j] = w;
    p.ids.v[at + j] = int(chosen[j]);
  }
}
