// Compiled as part of the model layer by tests/CMakeLists.txt to show that the
// build refuses an include pointing up the layers: model/ cannot see
// runtime/, so this must not compile there (and compiles in runtime itself).
#include "runtime/loader.h"

int strata_layering_probe() { return 0; }
