// Catch2 for files that also use LibTorch. LibTorch's logging header defines a CHECK macro that
// would replace Catch's (a failing CHECK would then abort the test binary): include it first
// (its include guard keeps it from coming back), drop its CHECK, then include Catch.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Logging.h>  // defines CHECK (logging_is_not_google_glog.h); ATen.h includes it
#undef CHECK
#include <catch2/catch.hpp>
