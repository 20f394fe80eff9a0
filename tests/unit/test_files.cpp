// Publishing files (runtime/files.hpp) and the safetensors header that nlohmann::json writes:
// a tensor name that needs JSON escapes reads back as itself.
#include "catch_torch.hpp"  // helpers.hpp includes LibTorch

#include <ATen/ATen.h>

#include <filesystem>

#include "checkpoint/safetensors.hpp"
#include "helpers.hpp"
#include "runtime/files.hpp"

namespace fs = std::filesystem;

TEST_CASE("publish puts a file or a directory under its final name and leaves no temporary", "[files]") {
  testing::TempDir dir;
  trainer::runtime::write_file_atomic(dir.file("a.txt"), "one");
  trainer::runtime::write_file_atomic(dir.file("a.txt"), "two");  // replaces
  CHECK(testing::read_file(dir.file("a.txt")) == "two");
  CHECK(!fs::exists(dir.file("a.txt.tmp")));

  fs::create_directories(dir.file("step.tmp"));
  trainer::runtime::write_file_atomic(dir.file("step.tmp/meta"), "m");
  trainer::runtime::publish(dir.file("step.tmp"), dir.file("step"));
  CHECK(testing::read_file(dir.file("step/meta")) == "m");
  CHECK(!fs::exists(dir.file("step.tmp")));

  CHECK_THROWS_WITH(trainer::runtime::publish(dir.file("missing"), dir.file("x")), Catch::Contains("missing"));
  CHECK_THROWS_WITH(trainer::runtime::write_file_atomic(dir.file("no/such/dir/f"), "x"), Catch::Contains("no/such/dir"));
}

TEST_CASE("safetensors: names that need JSON escapes round-trip, the header stays 8-byte aligned", "[files]") {
  testing::TempDir dir;
  const std::string odd = "layer \"0\"\\w\n\xC3\xA9";  // quote, backslash, newline, é
  const at::Tensor a = at::arange(6, at::kFloat).reshape({2, 3}), b = at::ones({4}, at::kFloat);
  trainer::checkpoint::write_safetensors(dir.file("m.safetensors"), {{odd, a}, {"plain", b}});
  const std::string bytes = testing::read_file(dir.file("m.safetensors"));
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(header % 8 == 0);
  CHECK(bytes.size() == 8 + header + (6 + 4) * 4);
  const auto back = trainer::checkpoint::read_safetensors(dir.file("m.safetensors"));
  REQUIRE(back.size() == 2);
  CHECK(at::equal(back.at(odd), a));
  CHECK(at::equal(back.at("plain"), b));
}
