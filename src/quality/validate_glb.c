/*
 * validate_glb: the glTF 2.0 binary (GLB) validator: the 12-byte header, the chunk walk,
 * then the JSON document (asset, buffers, bufferViews, accessors, meshes).
 *
 * Invariants: the JSON chunk goes through validate_json_scan first and reaches cJSON only
 * when it is valid and holds at most GLB_MAX_JSON_VALUES values, so a hostile chunk cannot
 * make cJSON allocate much more than a real glTF scene would. cJSON gets a NUL-terminated
 * copy, and the tree and the arrays built from it are freed on every path through
 * glb_check_document. Numbers taken from the document are integers in [0, 2^53]
 * (json_value_uint) and combined with checked arithmetic. The shared safety invariants
 * are in validate_int.h.
 *
 * Choices the header leaves open: chunks after the first two are allowed when of an
 * unknown type (the glTF spec says loaders ignore them), each with a length multiple of
 * 4; a second JSON chunk, or a BIN chunk other than the second, is invalid. asset.version
 * must read "2.<minor>". Buffers: byteLength >= 1; buffer 0 without uri is the BIN chunk
 * (byteLength <= its length); any other buffer needs a uri (its bytes are not here, its
 * byteLength is trusted). bufferViews: byteStride 4..252 and a multiple of 4. Accessors:
 * count >= 1, byteStride >= element size, offsets aligned to the component size, matrix
 * columns padded to 4 bytes; sparse indices/values inside their bufferViews; mesh
 * primitives' attributes/indices name existing accessors. An accessor without bufferView
 * is fine.
 */
#include "quality/validate.h"
#include "quality/validate_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#define GLB_MAX_JSON_VALUES 1000000u
#define MAX_SAFE_INTEGER 9007199254740992.0 /* 2^53: larger doubles are not exact integers */

#define GLB_CHUNK_JSON 0x4E4F534Au /* "JSON" little-endian */
#define GLB_CHUNK_BIN 0x004E4942u  /* "BIN\0" little-endian */

/* v as an integer in [0, 2^53]: true and *out set, or false. */
static bool json_value_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= MAX_SAFE_INTEGER) || d != (double)(uint64_t)d)
        return false;
    *out = (uint64_t)d;
    return true;
}

/* Member `name` of obj as an integer in [0, 2^53]. Returns 1 found (*out set), 0 absent,
 * -1 present but not such an integer. */
static int json_member_uint(const cJSON *obj, const char *name, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (v == NULL)
        return 0;
    return json_value_uint(v, out) ? 1 : -1;
}

/* The same for a required member: -1 unless present and valid. */
static int json_member_uint_required(const cJSON *obj, const char *name, uint64_t *out)
{
    return json_member_uint(obj, name, out) == 1 ? 0 : -1;
}

/* The same for an optional member with a default. */
static int json_member_uint_default(const cJSON *obj, const char *name, uint64_t dflt, uint64_t *out)
{
    int rc = json_member_uint(obj, name, out);
    if (rc == 0)
        *out = dflt;
    return rc < 0 ? -1 : 0;
}

/* Member `name` of obj as an array (NULL when absent, *bad when present and not an array). */
static const cJSON *json_member_array(const cJSON *obj, const char *name, bool *bad)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (v != NULL && !cJSON_IsArray(v)) {
        *bad = true;
        return NULL;
    }
    return v;
}

static size_t json_array_length(const cJSON *a)
{
    size_t count = 0;
    for (const cJSON *e = a ? a->child : NULL; e != NULL; e = e->next)
        count++;
    return count;
}

/* Bytes of one component, 0 when componentType is not a glTF 2.0 one. */
static uint64_t gltf_component_size(uint64_t component_type)
{
    switch (component_type) {
    case 5120: /* BYTE */
    case 5121: /* UNSIGNED_BYTE */
        return 1;
    case 5122: /* SHORT */
    case 5123: /* UNSIGNED_SHORT */
        return 2;
    case 5125: /* UNSIGNED_INT */
    case 5126: /* FLOAT */
        return 4;
    default:
        return 0;
    }
}

/* Bytes of one element (matrix columns padded to 4 bytes), 0 when type is unknown. */
static uint64_t gltf_element_size(const char *type, uint64_t comp)
{
    static const struct {
        const char *name;
        unsigned columns, rows;
    } types[] = {{"SCALAR", 1, 1}, {"VEC2", 1, 2}, {"VEC3", 1, 3}, {"VEC4", 1, 4},
                 {"MAT2", 2, 2},   {"MAT3", 3, 3}, {"MAT4", 4, 4}};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        if (strcmp(type, types[t].name) != 0)
            continue;
        if (types[t].columns == 1)
            return comp * types[t].rows;
        uint64_t column = comp * types[t].rows;
        column = (column + 3) & ~(uint64_t)3;
        return column * types[t].columns;
    }
    return 0;
}

typedef struct glb_view {
    uint64_t offset; /* byteOffset inside its buffer */
    uint64_t length;
    uint64_t stride; /* 0 = tightly packed */
} glb_view_t;

/* The parts of the glTF document validate_glb checks, and their verdict. */
typedef struct glb_doc {
    const cJSON *root;
    bool has_bin;
    uint64_t bin_length;
    uint64_t *buffer_lengths; /* byteLength of each buffer */
    size_t n_buffers;
    glb_view_t *views;
    size_t n_views;
    size_t n_accessors;
    char *why;
    size_t whylen;
} glb_doc_t;

static int glb_check_asset(glb_doc_t *d)
{
    const cJSON *asset = cJSON_GetObjectItemCaseSensitive(d->root, "asset");
    if (!cJSON_IsObject(asset))
        return fail(d->why, d->whylen, "glb: JSON has no \"asset\" object");
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(asset, "version");
    if (!cJSON_IsString(version) || version->valuestring == NULL)
        return fail(d->why, d->whylen, "glb: asset.version is missing");
    const char *v = version->valuestring;
    size_t k = 2;
    bool minor_ok = v[0] == '2' && v[1] == '.' && is_digit((unsigned char)v[2]);
    while (minor_ok && is_digit((unsigned char)v[k]))
        k++;
    if (!minor_ok || v[k] != '\0') {
        char q[QUOTE_MAX + 4];
        return fail(d->why, d->whylen, "glb: asset.version \"%s\" is not 2.x",
                    quote_bytes(q, sizeof q, (const unsigned char *)v, strlen(v)));
    }
    return 0;
}

static int glb_check_buffers(glb_doc_t *d)
{
    bool bad = false;
    const cJSON *buffers = json_member_array(d->root, "buffers", &bad);
    if (bad)
        return fail(d->why, d->whylen, "glb: \"buffers\" is not an array");
    d->n_buffers = json_array_length(buffers);
    if (d->n_buffers == 0)
        return 0;
    d->buffer_lengths = calloc(d->n_buffers, sizeof *d->buffer_lengths);
    if (d->buffer_lengths == NULL)
        return fail(d->why, d->whylen, "glb: out of memory");
    size_t i = 0;
    for (const cJSON *b = buffers->child; b != NULL; b = b->next, i++) {
        if (!cJSON_IsObject(b))
            return fail(d->why, d->whylen, "glb: buffer %zu is not an object", i);
        uint64_t len;
        if (json_member_uint_required(b, "byteLength", &len) != 0 || len == 0)
            return fail(d->why, d->whylen, "glb: buffer %zu has no valid byteLength", i);
        const cJSON *uri = cJSON_GetObjectItemCaseSensitive(b, "uri");
        if (uri != NULL && !cJSON_IsString(uri))
            return fail(d->why, d->whylen, "glb: buffer %zu uri is not a string", i);
        if (uri == NULL) {
            if (i != 0)
                return fail(d->why, d->whylen, "glb: buffer %zu has no uri (only buffer 0 may be the BIN chunk)", i);
            if (!d->has_bin)
                return fail(d->why, d->whylen, "glb: buffer 0 has no uri but there is no BIN chunk");
            if (len > d->bin_length)
                return fail(d->why, d->whylen, "glb: buffer 0 byteLength %llu exceeds the BIN chunk (%llu bytes)",
                            (unsigned long long)len, (unsigned long long)d->bin_length);
        }
        d->buffer_lengths[i] = len;
    }
    return 0;
}

static int glb_check_buffer_views(glb_doc_t *d)
{
    bool bad = false;
    const cJSON *views = json_member_array(d->root, "bufferViews", &bad);
    if (bad)
        return fail(d->why, d->whylen, "glb: \"bufferViews\" is not an array");
    d->n_views = json_array_length(views);
    if (d->n_views == 0)
        return 0;
    d->views = calloc(d->n_views, sizeof *d->views);
    if (d->views == NULL)
        return fail(d->why, d->whylen, "glb: out of memory");
    size_t i = 0;
    for (const cJSON *v = views->child; v != NULL; v = v->next, i++) {
        if (!cJSON_IsObject(v))
            return fail(d->why, d->whylen, "glb: bufferView %zu is not an object", i);
        uint64_t buffer, offset, length, stride, end;
        if (json_member_uint_required(v, "buffer", &buffer) != 0 || buffer >= d->n_buffers)
            return fail(d->why, d->whylen, "glb: bufferView %zu names no existing buffer", i);
        if (json_member_uint_default(v, "byteOffset", 0, &offset) != 0)
            return fail(d->why, d->whylen, "glb: bufferView %zu byteOffset is not a valid integer", i);
        if (json_member_uint_required(v, "byteLength", &length) != 0 || length == 0)
            return fail(d->why, d->whylen, "glb: bufferView %zu has no valid byteLength", i);
        int has_stride = json_member_uint(v, "byteStride", &stride);
        if (has_stride < 0 || (has_stride == 1 && (stride < 4 || stride > 252 || stride % 4 != 0)))
            return fail(d->why, d->whylen, "glb: bufferView %zu byteStride is not 4..252 and a multiple of 4", i);
        if (!add_u64(offset, length, &end) || end > d->buffer_lengths[buffer])
            return fail(d->why, d->whylen,
                        "glb: bufferView %zu (offset %llu + length %llu) is past the end of buffer %llu (%llu bytes)",
                        i, (unsigned long long)offset, (unsigned long long)length,
                        (unsigned long long)buffer, (unsigned long long)d->buffer_lengths[buffer]);
        d->views[i].offset = offset;
        d->views[i].length = length;
        d->views[i].stride = has_stride == 1 ? stride : 0;
    }
    return 0;
}

/* Checks that `count` items of `item` bytes, `stride` apart, starting at `offset`, fit in
 * view `view_index`, with offsets aligned to `align`. `what` names the data in reasons. */
static int glb_check_span(glb_doc_t *d, const char *what, size_t accessor, uint64_t view_index,
                          uint64_t offset, uint64_t count, uint64_t stride, uint64_t item, uint64_t align)
{
    if (view_index >= d->n_views)
        return fail(d->why, d->whylen, "glb: accessor %zu %s names no existing bufferView", accessor, what);
    const glb_view_t *v = &d->views[view_index];
    if (offset % align != 0 || (v->offset + offset) % align != 0)
        return fail(d->why, d->whylen, "glb: accessor %zu %s offset is not a multiple of its component size %llu",
                    accessor, what, (unsigned long long)align);
    uint64_t span = 0, end = 0;
    bool fits = count > 0 && mul_u64(count - 1, stride, &span) && add_u64(span, item, &span) &&
                add_u64(span, offset, &end) && end <= v->length;
    if (!fits)
        return fail(d->why, d->whylen,
                    "glb: accessor %zu %s (offset %llu, %llu x %llu bytes, stride %llu) is past the end of bufferView %llu (%llu bytes)",
                    accessor, what, (unsigned long long)offset, (unsigned long long)count,
                    (unsigned long long)item, (unsigned long long)stride,
                    (unsigned long long)view_index, (unsigned long long)v->length);
    return 0;
}

static int glb_check_sparse(glb_doc_t *d, size_t i, const cJSON *sparse, uint64_t count, uint64_t elem,
                            uint64_t comp)
{
    if (!cJSON_IsObject(sparse))
        return fail(d->why, d->whylen, "glb: accessor %zu sparse is not an object", i);
    uint64_t n_sparse, view, offset, ct;
    if (json_member_uint_required(sparse, "count", &n_sparse) != 0 || n_sparse == 0 || n_sparse > count)
        return fail(d->why, d->whylen, "glb: accessor %zu sparse.count is not 1..count", i);
    const cJSON *indices = cJSON_GetObjectItemCaseSensitive(sparse, "indices");
    const cJSON *values = cJSON_GetObjectItemCaseSensitive(sparse, "values");
    if (!cJSON_IsObject(indices) || !cJSON_IsObject(values))
        return fail(d->why, d->whylen, "glb: accessor %zu sparse needs indices and values objects", i);
    if (json_member_uint_required(indices, "bufferView", &view) != 0 ||
        json_member_uint_default(indices, "byteOffset", 0, &offset) != 0 ||
        json_member_uint_required(indices, "componentType", &ct) != 0 ||
        (ct != 5121 && ct != 5123 && ct != 5125))
        return fail(d->why, d->whylen, "glb: accessor %zu sparse.indices is malformed", i);
    uint64_t isize = gltf_component_size(ct);
    if (glb_check_span(d, "sparse indices", i, view, offset, n_sparse, isize, isize, isize) != 0)
        return -1;
    if (json_member_uint_required(values, "bufferView", &view) != 0 ||
        json_member_uint_default(values, "byteOffset", 0, &offset) != 0)
        return fail(d->why, d->whylen, "glb: accessor %zu sparse.values is malformed", i);
    return glb_check_span(d, "sparse values", i, view, offset, n_sparse, elem, elem, comp);
}

static int glb_check_accessors(glb_doc_t *d)
{
    bool bad = false;
    const cJSON *accessors = json_member_array(d->root, "accessors", &bad);
    if (bad)
        return fail(d->why, d->whylen, "glb: \"accessors\" is not an array");
    size_t i = 0;
    for (const cJSON *a = accessors ? accessors->child : NULL; a != NULL; a = a->next, i++) {
        if (!cJSON_IsObject(a))
            return fail(d->why, d->whylen, "glb: accessor %zu is not an object", i);
        uint64_t ct, count, view, offset;
        uint64_t comp = json_member_uint_required(a, "componentType", &ct) == 0 ? gltf_component_size(ct) : 0;
        if (comp == 0)
            return fail(d->why, d->whylen, "glb: accessor %zu componentType is not a glTF one", i);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(a, "type");
        uint64_t elem = cJSON_IsString(type) && type->valuestring ? gltf_element_size(type->valuestring, comp) : 0;
        if (elem == 0)
            return fail(d->why, d->whylen, "glb: accessor %zu type is not SCALAR, VECn or MATn", i);
        if (json_member_uint_required(a, "count", &count) != 0 || count == 0)
            return fail(d->why, d->whylen, "glb: accessor %zu has no valid count", i);
        if (json_member_uint_default(a, "byteOffset", 0, &offset) != 0)
            return fail(d->why, d->whylen, "glb: accessor %zu byteOffset is not a valid integer", i);
        int has_view = json_member_uint(a, "bufferView", &view);
        if (has_view < 0)
            return fail(d->why, d->whylen, "glb: accessor %zu bufferView is not a valid index", i);
        if (has_view == 1) {
            if (view >= d->n_views)
                return fail(d->why, d->whylen, "glb: accessor %zu names no existing bufferView", i);
            uint64_t stride = d->views[view].stride ? d->views[view].stride : elem;
            if (stride < elem)
                return fail(d->why, d->whylen, "glb: accessor %zu element (%llu bytes) is larger than its byteStride %llu",
                            i, (unsigned long long)elem, (unsigned long long)stride);
            if (glb_check_span(d, "data", i, view, offset, count, stride, elem, comp) != 0)
                return -1;
        }
        const cJSON *sparse = cJSON_GetObjectItemCaseSensitive(a, "sparse");
        if (sparse != NULL && glb_check_sparse(d, i, sparse, count, elem, comp) != 0)
            return -1;
    }
    d->n_accessors = i;
    return 0;
}

/* Mesh primitives must name existing accessors. */
static int glb_check_meshes(glb_doc_t *d)
{
    bool bad = false;
    const cJSON *meshes = json_member_array(d->root, "meshes", &bad);
    if (bad)
        return fail(d->why, d->whylen, "glb: \"meshes\" is not an array");
    size_t m = 0;
    for (const cJSON *mesh = meshes ? meshes->child : NULL; mesh != NULL; mesh = mesh->next, m++) {
        const cJSON *prims = cJSON_IsObject(mesh) ? json_member_array(mesh, "primitives", &bad) : NULL;
        if (!cJSON_IsObject(mesh) || bad || prims == NULL)
            return fail(d->why, d->whylen, "glb: mesh %zu has no primitives array", m);
        for (const cJSON *prim = prims->child; prim != NULL; prim = prim->next) {
            const cJSON *attrs = cJSON_IsObject(prim) ? cJSON_GetObjectItemCaseSensitive(prim, "attributes") : NULL;
            if (!cJSON_IsObject(attrs))
                return fail(d->why, d->whylen, "glb: mesh %zu has a primitive without attributes", m);
            uint64_t index;
            for (const cJSON *at = attrs->child; at != NULL; at = at->next) {
                if (!json_value_uint(at, &index) || index >= d->n_accessors)
                    return fail(d->why, d->whylen, "glb: mesh %zu attribute names no existing accessor", m);
            }
            int has = json_member_uint(prim, "indices", &index);
            if (has < 0 || (has == 1 && index >= d->n_accessors))
                return fail(d->why, d->whylen, "glb: mesh %zu indices names no existing accessor", m);
        }
    }
    return 0;
}

static int glb_check_document(const unsigned char *json, size_t json_len, bool has_bin, uint64_t bin_length,
                              char *why, size_t whylen)
{
    json_scan_t s;
    if (!validate_json_scan(json, json_len, &s))
        return validate_json_fail(why, whylen, "glb: JSON chunk does not parse: ", json, json_len, &s, 0);
    if (s.values > GLB_MAX_JSON_VALUES)
        return fail(why, whylen, "glb: JSON chunk holds more than %u values", GLB_MAX_JSON_VALUES);
    /* cJSON gets a NUL-terminated copy: it never relies on its length bound alone then. */
    char *copy = malloc(json_len + 1);
    if (copy == NULL)
        return fail(why, whylen, "glb: out of memory");
    memcpy(copy, json, json_len);
    copy[json_len] = '\0';
    cJSON *root = cJSON_ParseWithLength(copy, json_len);
    free(copy);
    if (root == NULL)
        return fail(why, whylen, "glb: JSON chunk could not be loaded (a lone \\u surrogate, or out of memory)");
    glb_doc_t d = {.root = root, .has_bin = has_bin, .bin_length = bin_length, .why = why, .whylen = whylen};
    int rc;
    if (!cJSON_IsObject(root))
        rc = fail(why, whylen, "glb: JSON chunk is not an object");
    else
        rc = (glb_check_asset(&d) == 0 && glb_check_buffers(&d) == 0 && glb_check_buffer_views(&d) == 0 &&
              glb_check_accessors(&d) == 0 && glb_check_meshes(&d) == 0) ? 0 : -1;
    free(d.buffer_lengths);
    free(d.views);
    cJSON_Delete(root);
    return rc;
}

static const char *glb_chunk_name(uint32_t type)
{
    return type == GLB_CHUNK_JSON ? "JSON" : type == GLB_CHUNK_BIN ? "BIN" : "unknown";
}

int validate_glb(const unsigned char *p, size_t n, char *why, size_t whylen)
{
    if (p == NULL || n < 12)
        return fail(why, whylen, "glb: %zu bytes, shorter than the 12-byte header", n);
    if (memcmp(p, "glTF", 4) != 0)
        return fail(why, whylen, "glb: bad magic (not \"glTF\")");
    uint32_t version = get_le32(p + 4);
    if (version != 2)
        return fail(why, whylen, "glb: version %u, not 2", version);
    uint32_t total = get_le32(p + 8);
    if ((uint64_t)total != (uint64_t)n)
        return fail(why, whylen, "glb: header says %u bytes, body has %zu (total length mismatch)", total, n);
    size_t off = 12, json_off = 0, json_len = 0;
    bool has_bin = false;
    uint64_t bin_len = 0;
    unsigned index = 0;
    if (n - off < 8)
        return fail(why, whylen, "glb: no JSON chunk");
    while (off < n) {
        if (n - off < 8)
            return fail(why, whylen, "glb: %zu trailing bytes after the last chunk", n - off);
        uint32_t len = get_le32(p + off), type = get_le32(p + off + 4);
        if ((uint64_t)len > (uint64_t)(n - off - 8))
            return fail(why, whylen, "glb: chunk %u (%s, %u bytes) at byte %zu runs past the end", index,
                        glb_chunk_name(type), len, off);
        if (len % 4 != 0)
            return fail(why, whylen, "glb: chunk %u (%s) length %u is not a multiple of 4", index,
                        glb_chunk_name(type), len);
        if (index == 0 && type != GLB_CHUNK_JSON)
            return fail(why, whylen, "glb: first chunk is not JSON");
        if (index > 0 && type == GLB_CHUNK_JSON)
            return fail(why, whylen, "glb: a second JSON chunk (chunk %u)", index);
        if (type == GLB_CHUNK_BIN && index != 1)
            return fail(why, whylen, "glb: BIN chunk is chunk %u, not chunk 1", index);
        if (index == 0) {
            json_off = off + 8;
            json_len = len;
        } else if (type == GLB_CHUNK_BIN) {
            has_bin = true;
            bin_len = len;
        }
        off += 8 + (size_t)len;
        index++;
    }
    return glb_check_document(p + json_off, json_len, has_bin, bin_len, why, whylen);
}
