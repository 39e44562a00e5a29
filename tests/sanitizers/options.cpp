// Default runtime options of a sanitizer build (VINF_SANITIZE), linked into every program of the
// build: ctest, mpirun and a program started by hand run with the same settings. The variables
// ASAN_OPTIONS, LSAN_OPTIONS and UBSAN_OPTIONS still add to them or override them.
//
// The sanitizers report into a finding's process and end it with a non-zero status, so a test
// that meets one fails.

extern "C" {

// ASan: also report globals initialised from another file's not yet initialised global
// (check_initialization_order, strict_init_order). Leak checking stays on (detect_leaks is the
// default on x86-64); what LeakSanitizer must not report lives in lsan.supp, each entry with its
// reason.
// A program may add its own options through VINF_ASAN_OPTIONS (the checkpoint fuzz target does).
#ifndef VINF_ASAN_OPTIONS
#define VINF_ASAN_OPTIONS ""
#endif
const char* __asan_default_options() { return "check_initialization_order=1:strict_init_order=1" VINF_ASAN_OPTIONS; }

// LeakSanitizer: the suppressions file beside this one (its path is fixed at configure time);
// print_suppressions=0 keeps the list of matched suppressions out of every test's output.
const char* __lsan_default_options() { return "suppressions=" VINF_LSAN_SUPPRESSIONS ":print_suppressions=0"; }

// Open MPI loads its components (mca_*.so) with dlopen and unloads them in MPI_Finalize. What they
// keep until exit is then reported from an unloaded module, with no name to match a suppression
// against (and its addresses may belong to a library loaded later). A sanitizer build keeps every
// module loaded, so each report names its library.
int dlclose(void*) { return 0; }

// UBSan: a stack trace with every report (the build has -fno-sanitize-recover, so the first
// report also ends the program).
const char* __ubsan_default_options() { return "print_stacktrace=1"; }

}
