/*
 * fuzz_agent_line: libFuzzer entry for the HAProxy agent-send parser and the answer line
 * (src/fleet/agent_line.c).
 *
 * For each input it:
 *   1. parses it as an agent-send string and checks the return convention: 0 with the host
 *      (no tier) or a model name of 1..AGENT_NAME_MAX allowed bytes and a known tier, or -1
 *      with a non-empty message
 *      free of control bytes and the host left as target;
 *   2. checks that parsing is deterministic, and that only the first line counts (the input
 *      cut at its first LF or CR parses the same);
 *   3. takes the input's first bytes as figures (room, tier, slots, sizes, maxconn,
 *      draining, foreign_blocked, down with the rest as the reason) and checks the answer: one line ending in "\n",
 *      within AGENT_LINE_MAX, a weight of 0..100 that is 0 when down or draining, words
 *      HAProxy knows (N%, maxconn:N with N >= 1, ready/drain, up/down) and a reason with no
 *      line break.
 * Any broken promise aborts. No global state. Replayed over tests/fuzz/corpus/agent_line.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/agent_line.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok)
{
    if (!ok)
        abort();
}

static void check_parse(const char *buf, size_t len)
{
    agent_req_t r, r2;
    char err[160], err2[160];
    int rc = agent_parse_request(buf, len, &r, err, sizeof err);
    check(rc == 0 || rc == -1);
    if (rc == 0) {
        check(r.tier == AGENT_TIER_ONE || r.tier == AGENT_TIER_RESIDENT || r.tier == AGENT_TIER_LOAD);
        if (r.target == AGENT_MODEL) {
            size_t n = strlen(r.name);
            check(n >= 1 && n <= AGENT_NAME_MAX);
            for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)r.name[i];
                check((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                      strchr("._-:/@+", ch) != NULL);
            }
        } else {
            check(r.target == AGENT_HOST && r.tier == AGENT_TIER_ONE);
        }
    } else {
        check(err[0] != '\0');
        check(r.target == AGENT_HOST);
        for (const char *p = err; *p; p++)
            check((unsigned char)*p >= 0x20 && *p != 0x7f);
    }
    int rc2 = agent_parse_request(buf, len, &r2, err2, sizeof err2);
    check(rc2 == rc && r2.target == r.target && strcmp(r2.name, r.name) == 0);
    if (len <= AGENT_REQ_MAX) {
        size_t end = 0;
        while (end < len && buf[end] != '\n' && buf[end] != '\r')
            end++;
        rc2 = agent_parse_request(buf, end, &r2, err2, sizeof err2);
        check(rc2 == rc && r2.target == r.target && strcmp(r2.name, r.name) == 0);
    }
}

static uint64_t take(const uint8_t **p, size_t *left, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n && *left > 0; i++, (*p)++, (*left)--)
        v = v << 8 | **p;
    return v;
}

static void check_answer(const uint8_t *data, size_t size)
{
    const uint8_t *p = data;
    size_t left = size;
    agent_figures_t f;
    memset(&f, 0, sizeof f);
    uint64_t flags = take(&p, &left, 1);
    f.draining = flags & 1;
    f.host = flags & 2;
    f.room = (enum agent_room)(take(&p, &left, 1) % 9); /* one past the last: treated as none */
    f.tier = (enum agent_tier)((flags >> 3) % 3);
    f.foreign_blocked = flags & 0x20;
    f.slots_ready = (unsigned)take(&p, &left, 4);
    f.slots_free = (unsigned)take(&p, &left, 4);
    f.free = take(&p, &left, 8);
    f.need = take(&p, &left, 8);
    f.capacity = take(&p, &left, 8);
    f.maxconn = (unsigned)take(&p, &left, 4);
    f.wait_ms = take(&p, &left, 8);
    f.load_ms = take(&p, &left, 8);
    if (flags & 4)
        agent_set_down(&f, "%.*s", (int)left, (const char *)p);
    unsigned w = agent_weight(&f);
    check(w <= 100);
    if (f.down || f.draining)
        check(w == 0);
    char line[AGENT_LINE_MAX];
    size_t n = agent_format(&f, line);
    check(n >= 1 && n < AGENT_LINE_MAX && strlen(line) == n && line[n - 1] == '\n');
    check(memchr(line, '\n', n - 1) == NULL && memchr(line, '\r', n) == NULL);
    unsigned pct, maxconn;
    char word[16];
    int used = 0;
    check(sscanf(line, "%u%% maxconn:%u %15s%n", &pct, &maxconn, word, &used) == 3);
    check(pct == w && maxconn >= 1);
    if (f.draining)
        check(strcmp(word, "drain") == 0 && strcmp(line + used, "\n") == 0);
    else if (f.down)
        check(strcmp(word, "ready") == 0 && strncmp(line + used, " down #", 7) == 0);
    else
        check(strcmp(word, "ready") == 0 && strcmp(line + used, " up\n") == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_parse((const char *)data, size);
    check_answer(data, size);
    return 0;
}
