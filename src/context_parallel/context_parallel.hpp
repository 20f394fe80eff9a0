// Context parallelism, all in one place: each sequence is split over the CP group, every rank
// computes the layers on its own tokens, and only attention talks to the other CP ranks.
//
// The load-balanced split. A sequence of S tokens is cut into 2·cp chunks of S/(2cp); CP rank r
// holds chunks r and 2cp−1−r, in that order (Megatron's, TransformerEngine's and PyTorch's
// balancer). Under the causal mask chunk c attends to c+1 chunks of keys, so every rank's pair
// costs the same (r+1 + 2cp−r = 2cp+1 chunk-blocks), where a plain split would give the last
// rank cp times the first's work. cp = 2, S = 8 (chunks of 2 tokens):
//
//   sequence   | t0 t1 | t2 t3 | t4 t5 | t6 t7 |
//   chunk          0       1       2       3
//   cp rank 0  | t0 t1 | t6 t7 |   positions 0 1 6 7
//   cp rank 1  | t2 t3 | t4 t5 |   positions 2 3 4 5
//
// Tokens, targets and positions are sharded together (shard_microbatches, local_positions);
// RoPE and learned positions use each token's global position.
//
// Attention (attention()): the ranks gather the whole sequence's keys and values (kv_heads/heads
// of the queries' size under GQA; an in-place sum of a zeroed buffer, context_parallel.cpp says
// why), and each local chunk c attends to the gathered keys in two flash-kernel calls
// that keep no S × S tensor: chunks 0..c−1 unmasked, and chunk c itself under the kernel's causal
// mask (square, so its top-left diagonal is the right one). The two partial results merge by their
// log-sum-exps in fp32. Backward calls the kernel's own backward for each part with the merged
// output and log-sum-exp (the gradient of a softmax over all keys, split by keys), and the key and
// value gradients are summed over the group the same way, each rank keeping its own tokens'.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "data/microbatch.hpp"
#include "distributed/comm.hpp"

namespace trainer::context_parallel {

// The global positions of the tokens CP rank `rank` of `size` holds, in its order: [seq_len / size] int64.
at::Tensor local_positions(int64_t seq_len, int rank, int size);

// This rank's part of every microbatch: tokens and targets [B, S] -> [B, S / cp] (the same
// microbatches when the group has one rank).
std::vector<data::MicroBatch> shard_microbatches(const std::vector<data::MicroBatch>& mbs, const distributed::Group& cp);

// Causal attention of this rank's queries q [B, heads, s, D] (s = S / cp, positions as
// local_positions) over the whole sequence, whose keys and values k, v [B, kv heads, s, D] are
// spread over `cp` the same way -> [B, heads, s, D] in q's dtype. kv heads divide heads.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, distributed::Group& cp);

}  // namespace trainer::context_parallel
