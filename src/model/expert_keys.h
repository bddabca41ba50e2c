// Routed-expert keys built from a family's spellings: the layout most releases share,
//   per expert:  "<layers>.<L>.<block>.<experts>.<E>.<gate | up | down>.weight"
//   packed:      "<layers>.<L>.<block>.<experts>.<gate_up | packed_down>", their biases
//                the same + "_bias"
//   PEFT:        module "<layers>.<L>.<block>.<experts>", target_parameters
//                "<block>.<experts>.<gate_up | packed_down>".
// The spellings are the family's and live in its folder (ModelFamily::expert_keys); this
// file only puts the parts together.
#pragma once

#include <string>

#include "model/family.h"

namespace glint {

struct ExpertSpelling {
  std::string layers;       // the decoder layers' module path: "model.layers"
  std::string block;        // the MoE block under a layer: "mlp" (Mixtral "block_sparse_moe")
  std::string experts;      // the routed experts under the block: "experts"
  std::string gate, up, down;        // one expert's projections: "gate_proj" (Mixtral "w1"), ...
  std::string gate_up, packed_down;  // the packed tensors: "gate_up_proj", "down_proj"
};

class SpelledExpertKeys : public ExpertKeys {
 public:
  explicit SpelledExpertKeys(ExpertSpelling spelling);
  std::string packed(int64_t layer, PackedExpert t) const override;
  std::string per_expert(int64_t layer, int64_t expert, ExpertProjection p) const override;
  bool is_expert_key(const std::string& key) const override;
  std::string peft_module(int64_t layer) const override;
  std::string peft_target_parameter(PackedExpert t) const override;
  const ExpertSpelling& spelling() const { return s_; }

 private:
  std::string packed_name(PackedExpert t) const;  // a bias: the tensor's name + "_bias"
  ExpertSpelling s_;
};

}  // namespace glint
