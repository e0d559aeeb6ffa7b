/*
 * hex: the value of one hexadecimal digit. Header-only (static inline) so that every binary
 * has it without linking libvramd.a: src/ (chunk sizes, percent-decoding), the CUDA shim
 * (shim/, its token) and the simulators (sim/) all use this one definition.
 */
#ifndef VRAMD_COMMON_HEX_H
#define VRAMD_COMMON_HEX_H

/* 0-15 for '0'-'9', 'a'-'f', 'A'-'F'; -1 for anything else (a char or an unsigned char). */
static inline int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
