#pragma once
// Everything one forward step works in, planned once per model and step size
// (llama2.c's RunState): the tensors on the backend and the host arrays of
// the step's bookkeeping (routing, grouping rows by expert, the guess at the
// next layer's experts). Model::attach_experts() plans it; the forward pass
// only takes slices of it, so it allocates nothing, and bytes() is what the
// RAM budget counts for it (with the backend's own scratch).
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace strata {

// Per row, the widest of each attention buffer over the model's layers.
struct AttentionWidths {
  size_t q = 0, k = 0, v = 0, out = 0;  // projections in, heads out
  size_t q_latent = 0, kv = 0;          // MLA: q_a, kv_a (KDA: f_a, the decay)
  size_t gate = 0, beta = 0;            // an output gate (K3's MLA and KDA); KDA's beta
};

struct StepSizes {
  size_t rows = 0;          // the most rows of one step
  // The most rows of one pass (>= rows): a pass of more rows than a step
  // runs layer by layer, each layer over its parts of `rows` rows in turn
  // (Model::forward), and keeps its residual stream whole between layers.
  size_t span = 0;
  size_t logit_rows = 0;    // rows whose logits one output product computes
  size_t hidden = 0, vocab = 0;
  AttentionWidths attention;
  size_t dense_width = 0;   // the dense MLP's width; 0 without dense layers
  size_t shared_width = 0;  // the shared experts' width; 0 without
  size_t experts = 0, experts_per_token = 0;  // 0 without MoE
  size_t guess_rows = 0;    // rows of a step that guesses the next layer's experts
  size_t latent_width = 0;  // a latent MoE's expert input width (Kimi K3); 0: none
  size_t depth_blocks = 0;  // AttnRes: block states kept (Kimi K3); 0: a plain residual stream
  size_t mtp_in = 0;        // an MTP layer's eh_proj input, [embedding ; hidden state]; 0 without MTP layers
  size_t moe_layers = 0;    // the decoder's MoE layers
  size_t held_rows = 0;     // rows of a step that may leave its routing to the backend (all where it may hold layers)
};

struct StepState {
  StepState() = default;
  StepState(Backend& backend, const StepSizes& sizes);

  StepSizes sizes;
  // The residual stream and what a block adds [span × hidden], and the
  // normalised input of a block [rows × hidden].
  Tensor h, normed, delta;
  // The guess at the next layer's experts [guess_rows × hidden], [guess_rows × experts].
  Tensor guess_normed, guess_logits;
  // AttnRes (Kimi K3): the banked block states [depth_blocks × span × hidden],
  // one tensor each, the rows of one part of them (bank_part: views), and
  // the mix that replaces the residual [rows × hidden].
  std::vector<Tensor> bank, bank_part;
  Tensor mixed;
  // One work tensor that each phase lays out anew: nothing of a layer's
  // attention outlives it, nothing of its feed-forward block (a dense MLP or
  // the MoE block) outlives that, and the output head comes after the layers.
  Tensor work;
  Tensor q, k, v, heads, q_latent, kv, gate_in, beta;  // attention (gate_in: its output gate)
  Tensor qkv;  // q, k and v one after another: room for n rows of each, in turn (Backend::linear_stacked)
  Tensor dense_gate, dense_up;          // a dense MLP [rows × dense_width]
  Tensor gate, up;                      // the shared expert [rows × shared_width]
  Tensor router_logits;                 // [rows × experts]
  Tensor shared;                        // the shared expert's output [rows × hidden]
  Tensor xs;                            // rows gathered per expert [rows·k × hidden]; the experts write their outputs over them
  Tensor latent_in, latent_out;         // a latent MoE's input and combined output [rows × latent_width]
  Tensor logits;                        // [logit_rows × vocab]
  Tensor mtp_in;                        // an MTP layer's input, before eh_proj [rows × mtp_in]

  std::vector<int32_t> tokens;     // [span]
  std::vector<int32_t> ids;        // routing [rows × k]
  std::vector<float> weights;
  std::vector<uint32_t> count;     // per expert: slots routed to it
  std::vector<uint32_t> first;     // per expert: its first row in xs
  std::vector<uint32_t> next;      // per expert: its next free row in xs
  std::vector<int32_t> unique;     // the experts a step routes to, largest groups first
  std::vector<uint64_t> thread_load;  // expert_threading's scratch [experts]
  std::vector<int32_t> held;       // of those, the ones the backend holds (no fetch)
  std::vector<int32_t> wanted;     // and the ones fetched
  std::vector<uint32_t> slot_rows; // per slot (row·k + j): its row in xs / ys
  std::vector<uint32_t> gather;    // per row of xs: the step row it comes from
  std::vector<ExpertJob> jobs;     // capacity: experts
  std::vector<std::pair<int, const ExpertWeights*>> ready;  // capacity: experts
  std::vector<uint32_t> guess_sample;  // the rows a longer step guesses from [guess_rows]
  std::vector<int32_t> guess_ids;  // [guess_rows × k]
  std::vector<float> guess_weights;
  std::vector<int32_t> guess;      // the guessed experts, likeliest first
  std::vector<int32_t> guess_reads;  // of those, the ones the backend does not hold
  std::vector<uint32_t> guess_count;  // per expert: rows that picked it in the guess
  std::vector<float> guess_best;   // per expert: its best weight in the guess
  // MoE layers the backend routed itself this step (Backend::route_held):
  // their ids and weights arrive at its collect_routing(), at the step's end,
  // at `at` in held_ids and held_weights [moe_layers × held_rows × k],
  // allocated once: the backend holds pointers into them until then.
  struct HeldRouting {
    int64_t layer = 0;
    size_t n = 0, at = 0;
  };
  std::vector<HeldRouting> held_routing;
  std::vector<int32_t> held_ids;
  std::vector<float> held_weights;
  std::vector<uint32_t> selected;  // rows whose logits are wanted
  std::vector<Row> chunk;          // a prefill pass's rows [span]

  // Bytes a step state of `sizes` takes: its tensors and host arrays (the
  // backend's own scratch comes on top: Backend::scratch_bytes()).
  static uint64_t bytes(const StepSizes& sizes);
  // Bytes of this state's host arrays as allocated (bytes() counts them too).
  uint64_t host_bytes() const;
};

}  // namespace strata
