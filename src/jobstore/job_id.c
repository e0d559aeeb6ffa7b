/*
 * job_id: 128-bit random job ids as 32 lowercase hex characters, and their strict validator
 * (the only gate between client-supplied ids and result file names). No state.
 */
#include "jobstore/job_id.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

int job_id_generate(char out[JOB_ID_SIZE])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[JOB_ID_LEN / 2];
    size_t got = 0;

    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            out[0] = '\0';
            return -1;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 0x0f];
    }
    out[JOB_ID_LEN] = '\0';
    return 0;
}

bool job_id_valid_n(const char *s, size_t len)
{
    if (s == NULL || len != JOB_ID_LEN)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return true;
}

bool job_id_valid(const char *s)
{
    if (s == NULL)
        return false;
    /* strnlen: never read past the 33rd byte of a longer string */
    size_t len = strnlen(s, JOB_ID_LEN + 1);
    return job_id_valid_n(s, len);
}
