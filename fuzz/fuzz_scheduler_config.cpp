// diffusers' scheduler_config.json reader (sampling/scheduler.cpp), then every scheduler built on
// an accepted config at a few step counts, and every step's coefficients: the values of the file
// index the noise tables.
#include <cmath>

#include "fuzz_support.hpp"
#include "sampling/scheduler.hpp"

namespace s = vinf::sampling;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = vinf::fuzz::write_file("scheduler_config.json", {reinterpret_cast<const char*>(data), size});
  vinf::fuzz::expect_input_errors_only([&] {
    const s::NoiseScheduleConfig c = s::read_scheduler_config(path);
    for (s::SchedulerKind kind : {s::SchedulerKind::dpmpp_sde, s::SchedulerKind::dpmpp_sde_karras,
                                  s::SchedulerKind::dpmpp, s::SchedulerKind::ddim}) {
      for (int steps : {1, 2, 25}) {
        if (steps > c.num_train_timesteps) continue;
        const s::Scheduler sched(kind, c, steps, kind == s::SchedulerKind::ddim ? 0.5 : 0.0);
        if (sched.steps() != steps || sched.sigmas().size() != static_cast<std::size_t>(steps) + 1) std::abort();
        for (std::int64_t t : sched.timesteps())
          if (t < 0 || t >= c.num_train_timesteps) std::abort();
        for (int i = 0; i < steps; ++i) (void)sched.coefficients(i);
      }
    }
  });
  return 0;
}
