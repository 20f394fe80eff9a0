// Catch2 for files that also use LibTorch. LibTorch includes glog, whose CHECK macro would
// replace Catch's: include glog first (its include guard keeps it from coming back), drop its
// CHECK, then include Catch.
#pragma once

#include <ATen/core/Tensor.h>
#undef CHECK
#include <catch2/catch.hpp>
