#pragma once
// Which instruction set the kernels use. Chosen once at run time from what
// the CPU supports (never from the build machine); STRATA_KERNELS=scalar|avx2|
// avx512 in the environment forces one. All choices give identical bits, so
// this only changes speed.
namespace strata::kernels {

enum class Isa { Scalar, Avx2, Avx512 };

const char* isa_name(Isa isa);
// Whether this build has the implementation and this CPU (and OS) can run it.
bool isa_supported(Isa isa);
// The ISA in use (resolving STRATA_KERNELS on first call; throws
// strata::Error if it names an unknown or unsupported ISA).
Isa active_isa();
// Switches ISA for the whole process (tests, benchmarks). Throws
// strata::Error if unsupported. Not to be called while kernels are running.
void set_isa(Isa isa);

}  // namespace strata::kernels
