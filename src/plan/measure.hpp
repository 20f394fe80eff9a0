// `--gpu cpu`: this machine as plan's hardware, measured rather than looked up: the matmul
// peak (bench-peak's measurement), memory bandwidth (a large copy), available memory
// (/proc/meminfo), and Gloo's loopback bandwidth and latency (`trainer bench-comm`, two local
// processes timing all-reduces).
#pragma once

#include <string>

#include "config/config.hpp"
#include "distributed/job_env.hpp"
#include "plan/hardware.hpp"

namespace trainer::plan {

// Gloo all-reduce between local processes, as a ring over r ranks:
// t(bytes) ≈ 2(r − 1)·latency + 2(r − 1)/r · bytes / bandwidth.
struct CommFigures {
  double latency_us = 0;
  double gbs = 0;
};

// The worker side of `trainer bench-comm`: every rank of `job` times all-reduces from 4 KiB to
// 32 MiB; rank 0 fits the line and writes {"latency_us":..,"gbs":..} to `output`, or prints it
// when `output` is empty.
CommFigures bench_comm(const distributed::JobEnv& job, const std::string& output);

// Runs bench-comm on two local processes and reads its figures.
CommFigures measure_comm();


// This machine for `runtime`'s precision (and CPU bf16 products), measured as above (every rank
// local: gpus_per_node 0).
Hardware measure_cpu(const RuntimeConfig& runtime);

}  // namespace trainer::plan
