// The CPU reference is compiled twice from the same sources: with REAL = float it is the
// "cpu" backend (the product's reference); with CPU_REAL_DOUBLE defined it is "cpu64", used
// by the tests for finite-difference gradient checks in double precision. Reductions
// accumulate in double in both builds, in a fixed order.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "kernels/common/philox.h"

#ifdef CPU_REAL_DOUBLE
typedef double real;
#define CPU_OP(name) cpu64_##name
#else
typedef float real;
#define CPU_OP(name) cpu_##name
#endif
