/*
 * cli_render: vramctl's text output, as pure functions from data to text (no I/O, no
 * clock, no environment): byte and duration formatting, stacked memory bars, aligned
 * tables, and the whole `status` view rendered from a /v1/status document. `top` renders
 * the same view once per refresh. Unit-tested in tests/unit/test_cli_render.c.
 *
 * Colour: with color set, segments of a bar and states get ANSI SGR colours; without it
 * the output is plain ASCII (each bar segment has its own character), so that it reads the
 * same in a log file, a pipe or a terminal without colours.
 *
 * Return convention: renderers append to a buf_t and return 0, or -1 when the buffer's
 * maximum was reached (the text is then cut short).
 */
#ifndef VRAMD_CLI_CLI_RENDER_H
#define VRAMD_CLI_CLI_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/buf.h"

#define CLI_BAR_MAX_SEGMENTS 16

/* o's member key as a string or a number, else dflt (a missing member, another type). */
const char *cli_str_of(const cJSON *o, const char *key, const char *dflt);
double cli_num_of(const cJSON *o, const char *key, double dflt);
/* "12.3" (GiB, one decimal) */
void cli_format_gib(uint64_t bytes, char *out, size_t cap);
/* "12.3 GiB", "512 MiB", "0 B": a short human size with a unit, for single values */
void cli_format_bytes(uint64_t bytes, char *out, size_t cap);
/* "850ms", "12.4s", "3m05s", "2h07m", "3d04h": a short elapsed time */
void cli_format_elapsed(uint64_t ms, char *out, size_t cap);

typedef struct cli_segment {
    const char *label; /* legend text: a model name, "requests", "foreign", ... */
    uint64_t bytes;
    char glyph;       /* the character that draws it in plain mode */
    const char *sgr;  /* ANSI SGR parameters for colour mode, e.g. "42" (green background) */
} cli_segment_t;

/*
 * Widths of the segments of a bar `width` characters wide representing `total` bytes,
 * into cells[n]. The cells add up to width when the segments fill total (less when they
 * leave part of it unaccounted, which is drawn as blank). Rounding is cumulative, so the
 * boundaries are exact to a character; a segment that is not empty but rounds to nothing
 * gets one cell taken from the largest one, so it stays visible.
 */
void cli_bar_cells(const cli_segment_t *segs, size_t n, uint64_t total, int width, int *cells);
/* "[####====++..]" (plain) or the same with colours: width cells inside the brackets. */
int cli_render_bar(buf_t *out, const cli_segment_t *segs, size_t n, uint64_t total, int width, bool color);

/* A table: rows of cells (strings), columns padded to their widest cell, separated by two
 * spaces, the first row being the header. Cells are copied; the table owns them. */
#define CLI_TABLE_MAX_COLS 12
typedef struct cli_table {
    size_t n_cols;
    size_t n_rows;
    size_t cap_rows;
    char **cells; /* n_rows * n_cols */
} cli_table_t;

void cli_table_init(cli_table_t *t, size_t n_cols);
/* Add a row of n_cols cells (NULL cells print as "-"). 0, or -1 when out of memory. */
int cli_table_add(cli_table_t *t, const char *const *cells);
int cli_table_render(buf_t *out, const cli_table_t *t, const char *indent, bool color);
void cli_table_free(cli_table_t *t);

typedef struct cli_view_opts {
    bool color;
    int width;         /* terminal columns (>= 40) */
    const char *url;   /* shown in the header line */
    uint64_t wall_ms;  /* now, for the header line's clock and the events' ages (0 = omit the clock) */
    int max_events;    /* the last N events (0 = none) */
} cli_view_opts_t;

/* The `status` view of a /v1/status document: header, GPUs with bars, models, events. */
int cli_render_status(buf_t *out, const cJSON *status, const cli_view_opts_t *v);

/* Several hosts (cli_fleet.c): each its URL and /v1/status document, or why not. */
typedef struct cli_fleet_host {
    const char *url;
    cJSON *status;     /* NULL when it could not be fetched */
    const char *error; /* then: why */
} cli_fleet_host_t;
/* One line per host, then one line per model with a column per host (the first
 * CLI_TABLE_MAX_COLS - 1 hosts). */
int cli_render_fleet(buf_t *out, const cli_fleet_host_t *hosts, size_t n, const cli_view_opts_t *v);

#endif
