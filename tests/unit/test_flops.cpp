// Parameter count and FLOPs per token against hand counts.
#include <catch2/catch.hpp>

#include "model/flops.hpp"

using namespace trainer;

TEST_CASE("parameter count of GPT-2 small is 124M", "[flops]") {
  ModelConfig m;
  m.layers = 12, m.hidden = 768, m.heads = 12, m.ffn = 3072, m.vocab_size = 50257, m.seq_len = 1024;
  CHECK(model::count_parameters(m) == 124439808);  // Hugging Face "gpt2"
}

TEST_CASE("FLOPs per token match a hand count", "[flops]") {
  ModelConfig m;  // 2 layers, h=8, ffn=32, V=16, S=4, GELU
  m.layers = 2, m.hidden = 8, m.heads = 2, m.ffn = 32, m.vocab_size = 16, m.seq_len = 4;
  // per layer: qkv 3*64 + proj 64 + fc1 256 + fc2 256 = 768 weights; head 8*16 = 128.
  // 6 * (2*768 + 128) = 9984; attention 12 * 2 * 4 * 8 = 768.
  CHECK(model::flops_per_token(m) == Approx(9984 + 768));
  m.mlp = Mlp::SwiGlu;  // gate adds 256 per layer
  CHECK(model::flops_per_token(m) == Approx(6.0 * (2 * 1024 + 128) + 768));
}

TEST_CASE("grouped-query attention: Llama 3 8B and 70B parameter counts", "[flops]") {
  ModelConfig m;  // the published shapes (Meta's config.json for Llama-3-8B / -70B)
  m.layers = 32, m.hidden = 4096, m.heads = 32, m.kv_heads = 8, m.ffn = 14336, m.vocab_size = 128256;
  m.seq_len = 8192, m.positions = Positions::Rope, m.norm = Norm::RmsNorm, m.mlp = Mlp::SwiGlu;
  m.tied_embeddings = false, m.bias = false;
  CHECK(model::count_parameters(m) == 8030261248LL);
  m.layers = 80, m.hidden = 8192, m.heads = 64, m.ffn = 28672;
  CHECK(model::count_parameters(m) == 70553706496LL);
}

TEST_CASE("grouped-query attention: fewer key/value weights in the FLOPs", "[flops]") {
  ModelConfig m;  // 2 layers, h=8, 2 heads of 4, ffn=32, V=16, S=4, GELU
  m.layers = 2, m.hidden = 8, m.heads = 2, m.ffn = 32, m.vocab_size = 16, m.seq_len = 4;
  const double mha = model::flops_per_token(m);
  const auto mha_params = model::count_parameters(m);
  m.kv_heads = 1;  // keys and values: 2 * 1 * 4 rows of 8 = 64 weights per layer instead of 128
  CHECK(model::flops_per_token(m) == Approx(mha - 6.0 * 2 * 64));
  CHECK(model::count_parameters(m) == mha_params - 2 * (64 + 8));  // and 8 fewer bias entries
}
