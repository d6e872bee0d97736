// A deliberate layering violation for check_layer_includes.py: a file at
// the path of a base header (common/mutex.h, layer rkv_base) that includes
// a format header. Both are header-only, so no linker would notice; the
// include check must (tests/layering/CMakeLists.txt). Never compiled.
#pragma once

#include "common/layout.h"
