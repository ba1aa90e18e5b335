//===- Pipelines.cpp - the named pipelines ---------------------------------===//
#include "tilec/Passes.h"

void tilec::registerTilecPipelines() {}
