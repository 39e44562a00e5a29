// A --profile report (exec/profile.hpp) as JSON: what the benchmarks and `vinf forward` write.
#pragma once

#include <nlohmann/json.hpp>

#include "exec/profile.hpp"

namespace vinf {

inline nlohmann::ordered_json profile_json(const ProfileReport& r) {
  auto rows = [](const std::vector<ProfileRow>& v) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const ProfileRow& row : v)
      a.push_back({{"name", row.name}, {"s_per_call", row.seconds}, {"ops_per_call", row.calls}});
    return a;
  };
  return {{"clock", r.clock},
          {"calls", r.calls},
          {"call_s", r.call_s},
          {"op_s", r.op_s},
          {"gap_s", r.gap_s()},
          {"ops_per_call", r.op_calls},
          {"kernel_launches_per_call", r.launches},
          {"library_calls_per_call", r.library_calls},
          {"host_syncs_per_call", r.host_syncs},
          {"by_op_kind", rows(r.by_kind)},
          {"by_module", rows(r.by_module)},
          {"by_module_kind", rows(r.by_module_kind)}};
}

}  // namespace vinf
