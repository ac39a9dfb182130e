#pragma once
// DeepSeek-V3's next-token-prediction (MTP) layer: what it holds beyond a
// decoder layer, bound and kept for a drafter (runtime/drafter.h:
// make_mtp_drafter), which runs it through Model::mtp_forward()
// (model/mtp_forward.cpp). The forward pass never reads it, so a model's
// outputs are the same with or without it.
//
// Contract (DeepSeek-V3 technical report §2.2; vLLM's deepseek_mtp.py): MTP
// layer k (0-based) is checkpoint layer num_hidden_layers + k. For the token
// at position i+1 and the main model's final hidden state h_i, after the
// final norm (what lm_head reads, and what vLLM's and SGLang's DeepSeek
// models hand their MTP layers), it computes
//   x = eh_proj · [enorm(embed_tokens[t]) ; hnorm(h_i)]   (embedding first)
// then runs the layer's decoder block (attention over its own cache at RoPE
// position i, norms and MoE, routed experts too) on x, and
// shared_head.head(shared_head.norm(·)) gives the logits of the token after. embed_tokens and shared_head.head hold the main
// model's embedding and output head in DeepSeek-V3's release but are stored,
// so they are bound from the layer's own tensors.
//
// Its routed experts stream like the decoder layers' when the model streams
// (the catalog and a pack list layers num_layers.. too; model/checkpoint.h:
// is_streamed_expert_tensor), through the same expert cache and budget; in
// RAM, or from a pack made before they streamed (its trunk holds them), they
// are bound from the checkpoint's tensors.
#include <cstdint>

#include "kernels/linear.h"
#include "model/model_config.h"

namespace strata {

class WeightBinder;

struct MtpHead {
  const float* enorm = nullptr;      // [hidden]: RMSNorm of the next token's embedding
  const float* hnorm = nullptr;      // [hidden]: RMSNorm of the main model's hidden state
  kernels::WeightMatrix eh_proj;     // [hidden, 2·hidden]
  kernels::WeightMatrix embed;       // [vocab, hidden], read a row at a time
  const float* head_norm = nullptr;  // [hidden]: shared_head.norm
  kernels::WeightMatrix head;        // [vocab, hidden]: shared_head.head
};

// Binds MTP layer `layer` (its checkpoint index, >= num_hidden_layers);
// a missing tensor is an error naming it.
MtpHead bind_mtp_head(WeightBinder& w, const ModelConfig& c, int64_t layer);

}  // namespace strata
