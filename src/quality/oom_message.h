/*
 * oom_message: what an out-of-memory answer says about the memory the failed request
 * really wanted. Pure; no I/O, no allocation.
 *
 * PyTorch's caching allocator words its OOM error in one of two ways, and servers pass the
 * text on in their 500 body or their {"success": false, "error": ...} field:
 *   up to 2.0:  "CUDA out of memory. Tried to allocate 10.00 GiB (GPU 0; 24.00 GiB total
 *                capacity; 11.00 GiB already allocated; 7.62 GiB free; 11.00 GiB reserved in
 *                total by PyTorch)"
 *   2.1 on:     "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity
 *                of 14.75 GiB of which 7.06 MiB is free. Including non-PyTorch memory, this
 *                process has 14.74 GiB memory in use. Of the allocated memory ..."
 * oom_message_need reads the size the process tried to allocate and what it already held
 * (the largest of "already allocated", "reserved in total by PyTorch" and "this process
 * has ... memory in use") and returns their sum: a lower bound of the memory the process
 * needed at that moment. 0 when the text does not say (no "Tried to allocate"). Sizes of
 * other processes ("Process 123 has ...") are ignored.
 * Bounds: reads at most OOM_MESSAGE_SCAN bytes of the text; a size over 2^50 bytes (1 PiB)
 * is taken as no information; the sum saturates.
 */
#ifndef VRAMD_QUALITY_OOM_MESSAGE_H
#define VRAMD_QUALITY_OOM_MESSAGE_H

#include <stddef.h>
#include <stdint.h>

#define OOM_MESSAGE_SCAN (64 * 1024)

uint64_t oom_message_need(const char *text, size_t len);

#endif
