// A check file whose only prefix has nothing but -NOT lines (check-prefixes.test).
// RUN: true | FileCheck %s --check-prefix=ONLYNOT
// ONLYNOT-NOT: x
