//===- Passes.td - every tilec pass ----------------------------------------===//
#ifndef TILEC_PASSES_TD
#define TILEC_PASSES_TD

include "mlir/Pass/PassBase.td"

#endif // TILEC_PASSES_TD
