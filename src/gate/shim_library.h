/*
 * shim_library: where libvramd-cuda.so (the CUDA shim, shim/) is on this host. Looked up in
 * order: $VRAMD_CUDA_SHIM_LIBRARY (that file or nothing), beside vramd's binary
 * (../lib/libvramd-cuda.so: a build tree; ../lib/vramd/libvramd-cuda.so: an install under a
 * prefix), /usr/lib/vramd/libvramd-cuda.so (the Debian package). No state.
 */
#ifndef VRAMD_GATE_SHIM_LIBRARY_H
#define VRAMD_GATE_SHIM_LIBRARY_H

#include <stdbool.h>
#include <stddef.h>

/* The library's real path into out ("" when none is found); true when found. */
bool shim_library_find(char *out, size_t cap);
/* Is path a regular file? */
bool shim_library_file_ok(const char *path);

#endif
