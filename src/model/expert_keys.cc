#include "model/expert_keys.h"

#include <cctype>
#include <utility>

#include "core/error.h"

namespace glint {

SpelledExpertKeys::SpelledExpertKeys(ExpertSpelling spelling) : s_(std::move(spelling)) {
  for (const std::string* part : {&s_.layers, &s_.block, &s_.experts, &s_.gate, &s_.up, &s_.down, &s_.gate_up,
                                  &s_.packed_down})
    GLINT_ASSERT(!part->empty(), "an expert spelling leaves a part empty (", s_.layers, ", ", s_.block, ", ",
                 s_.experts, ")");
}

std::string SpelledExpertKeys::packed_name(PackedExpert t) const {
  switch (t) {
    case PackedExpert::kGateUp: return s_.gate_up;
    case PackedExpert::kDown: return s_.packed_down;
    case PackedExpert::kGateUpBias: return s_.gate_up + "_bias";
    case PackedExpert::kDownBias: return s_.packed_down + "_bias";
  }
  GLINT_ASSERT(false);
  return "";
}

std::string SpelledExpertKeys::peft_module(int64_t layer) const {
  return s_.layers + "." + std::to_string(layer) + "." + s_.block + "." + s_.experts;
}

std::string SpelledExpertKeys::packed(int64_t layer, PackedExpert t) const {
  return peft_module(layer) + "." + packed_name(t);
}

std::string SpelledExpertKeys::per_expert(int64_t layer, int64_t expert, ExpertProjection p) const {
  const std::string& proj = p == ExpertProjection::kGate ? s_.gate : p == ExpertProjection::kUp ? s_.up : s_.down;
  return peft_module(layer) + "." + std::to_string(expert) + "." + proj + ".weight";
}

std::string SpelledExpertKeys::peft_target_parameter(PackedExpert t) const {
  return s_.block + "." + s_.experts + "." + packed_name(t);
}

bool SpelledExpertKeys::is_expert_key(const std::string& key) const {
  // "<layers>.<digits>.<block>.<experts>.<rest>"
  const std::string head = s_.layers + ".";
  if (key.compare(0, head.size(), head) != 0) return false;
  size_t i = head.size();
  const size_t digits = i;
  while (i < key.size() && std::isdigit(static_cast<unsigned char>(key[i]))) ++i;
  if (i == digits) return false;
  const std::string mid = "." + s_.block + "." + s_.experts + ".";
  return key.compare(i, mid.size(), mid) == 0 && key.size() > i + mid.size();
}

}  // namespace glint
