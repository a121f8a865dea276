//===- Blas.h - The platform's C BLAS interface -----------------*- C++ -*-===//
//
// cblas_sgemm and cblas_sgemv: OpenBLAS's cblas.h on Linux (Debian's
// libopenblas-dev), Accelerate on macOS. Accelerate is asked for its current
// interface (ACCELERATE_NEW_LAPACK; the older one is deprecated since macOS
// 13.3), whose integers are 32-bit as cblas.h's are unless ILP64 is asked for.
//
//===----------------------------------------------------------------------===//
#pragma once

#if defined(__APPLE__)
#ifndef ACCELERATE_NEW_LAPACK
#define ACCELERATE_NEW_LAPACK
#endif
#include <Accelerate/Accelerate.h>
#else
#include <cblas.h>
#endif
