#pragma once
// Planted for Layering.CheckRefusesPlantedHeaderIncludes: a model-layer
// header that reaches up, once by folder and once by climbing out with "..".
#include "runtime/loader.h"
#include "../server/server.h"
