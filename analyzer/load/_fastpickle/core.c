/* The pickle parsing core of hangscope's compiled reader. See core.h. No Python here. */
#include "core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const fp_field_names[FP_N_FIELDS] = {
    "record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id", "time_created_ns",
    "time_discovered_started_ns", "time_discovered_completed_ns", "timeout_ms",
    "is_p2p", "retired", "duration_ms",
    "profiling_name", "process_group", "input_sizes", "output_sizes", "input_dtypes",
    "output_dtypes", "state", "thread_name", "frames",
};
/* What the Python reader puts where a value is None or missing. */
const int64_t fp_int_defaults[FP_N_INTS] = {-1, -1, -1, -1, -1, 0, 0, 0, 0};

/* 2,000 nodes (64 KB) per chunk: under malloc's mmap threshold, so chunks are reused from
 * one parse to the next instead of being mapped and faulted in afresh. */
#define CHUNK_NODES 2000
struct fp_chunk {
    fp_chunk *next;
    size_t used;
    fp_node nodes[CHUNK_NODES];
};

static int decline(fp_doc *doc, const char *why, size_t where) {
    if (!doc->why) {
        doc->why = why;
        doc->where = where;
    }
    return -1;
}

static fp_node *new_node(fp_doc *doc, uint8_t tag) {
    fp_chunk *c = doc->chunks;
    if (!c || c->used == CHUNK_NODES) {
        c = malloc(sizeof *c);
        if (!c) return NULL;
        c->next = doc->chunks;
        c->used = 0;
        doc->chunks = c;
    }
    fp_node *n = &c->nodes[c->used++];
    n->tag = tag;
    n->hashed = 0;
    n->field = -2;
    n->len = 0;
    n->cap = 0;
    n->hash = 0;
    n->u.items = NULL;
    return n;
}

/* Item slots come from blocks of the document, newest first: one malloc per BLOCK_SLOTS
 * slots instead of one (and a free) per container, all freed with the document. A
 * container whose slots are the newest of the current block grows in place; any other
 * takes new slots and leaves its old ones behind (at most as many again). */
#define BLOCK_SLOTS 8000  /* 64 KB: under malloc's mmap threshold, like the node chunks */
struct fp_block {
    fp_block *next;
    size_t used, cap;
    fp_node *slots[];
};

static fp_node **take_slots(fp_doc *doc, size_t count) {
    fp_block *b = doc->blocks;
    if (b && b->cap - b->used >= count) {
        fp_node **p = b->slots + b->used;
        b->used += count;
        return p;
    }
    size_t cap = count > BLOCK_SLOTS ? count : BLOCK_SLOTS;
    if (cap > (SIZE_MAX - sizeof *b) / sizeof(fp_node *)) return NULL;
    fp_block *fresh = malloc(sizeof *fresh + cap * sizeof(fp_node *));
    if (!fresh) return NULL;
    fresh->used = count;
    fresh->cap = cap;
    if (b && cap > BLOCK_SLOTS) {  /* an outsized request: behind the current block */
        fresh->next = b->next;
        b->next = fresh;
    } else {
        fresh->next = b;
        doc->blocks = fresh;
    }
    return fresh->slots;
}

static int add_items(fp_doc *doc, fp_node *n, fp_node **items, size_t count) {
    if (count > UINT32_MAX - n->len) return -1;
    size_t need = (size_t)n->len + count;
    if (need > n->cap) {
        size_t cap = n->cap ? n->cap : 4;
        while (cap < need) cap *= 2;
        if (cap > UINT32_MAX) cap = UINT32_MAX;
        fp_block *b = doc->blocks;
        if (b && n->cap && n->u.items + n->cap == b->slots + b->used && b->cap - b->used >= cap - n->cap) {
            b->used += cap - n->cap;  /* the newest slots: grown in place */
        } else {
            fp_node **grown = take_slots(doc, cap);
            if (!grown) return -1;
            if (n->len) memcpy(grown, n->u.items, (size_t)n->len * sizeof *grown);
            n->u.items = grown;
        }
        n->cap = (uint32_t)cap;
    }
    memcpy(n->u.items + n->len, items, count * sizeof *items);
    n->len = (uint32_t)need;
    return 0;
}

/* Strict UTF-8 (no surrogates, no overlong forms). Python accepts encoded surrogates in
 * pickles; such a string is declined rather than decoded differently. */
static int valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t k;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; }
        else return 0;
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += k + 1;
    }
    return 1;
}

static uint64_t le(const uint8_t *p, int n) {
    switch (n) {  /* the widths opcodes use, unrolled */
    case 1: return p[0];
    case 2: return (uint64_t)p[0] | (uint64_t)p[1] << 8;
    case 4: return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
    default: {
        uint64_t v = 0;
        for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
        return v;
    }
    }
}

int fp_parse(fp_doc *doc, const uint8_t *data, size_t size) {
    doc->data = data;
    doc->size = size;
    /* Comparing and converting may visit at most this many nodes in all. */
    doc->budget = 16 * (size_t)size + (1u << 20);
    size_t stack_cap = 64, marks_cap = 16, sp = 0, mp = 0;
    fp_node **stack = malloc(stack_cap * sizeof *stack);
    size_t *marks = malloc(marks_cap * sizeof *marks);
    size_t pos = 0;
    int rc = -1;
    fp_node *single[3] = {NULL, NULL, NULL};
    if (!stack || !marks) { decline(doc, "out of memory", 0); goto done; }
    if (size > FP_MAX_BYTES) {
        decline(doc, "file larger than the compiled reader takes", 0);
        goto done;
    }
    if (size < 2 || data[0] != 0x80 || data[1] < 2 || data[1] > 5) {
        decline(doc, "not a pickle of protocol 2 to 5", 0);
        goto done;
    }
    pos = 2;
#define NEED(k) do { if (size - pos < (size_t)(k)) { decline(doc, "truncated", op_at); goto done; } } while (0)
#define FENCE (mp ? marks[mp - 1] : 0)
#define PUSH(node) do { fp_node *pushed_ = (node); \
        if (!pushed_) { decline(doc, "out of memory", op_at); goto done; } \
        if (sp == stack_cap) { fp_node **g_ = realloc(stack, 2 * stack_cap * sizeof *g_); \
            if (!g_) { decline(doc, "out of memory", op_at); goto done; } \
            stack = g_; stack_cap *= 2; } \
        stack[sp++] = pushed_; } while (0)
#define UNDER(k) do { if (sp - FENCE < (size_t)(k)) { decline(doc, "stack underflow", op_at); goto done; } } while (0)
    while (pos < size) {
        size_t op_at = pos;
        uint8_t op = data[pos++];
        /* BINGET is most of a dump's opcodes (every repeated key and shared value): first,
         * out of the switch. Anything unusual about it falls through to the switch. */
        if (op == 'h' && pos < size) {
            size_t idx = data[pos];
            if (idx < doc->memo_cap && doc->memo[idx] && sp < stack_cap) {
                stack[sp++] = doc->memo[idx];
                pos++;
                continue;
            }
        }
        switch (op) {
        case 0x95: { /* FRAME: a length prefix, checked and otherwise ignored */
            NEED(8);
            uint64_t flen = le(data + pos, 8);
            pos += 8;
            if (flen > size - pos) { decline(doc, "truncated frame", op_at); goto done; }
            break;
        }
        case '.': /* STOP */
            if (sp != 1 || mp != 0) { decline(doc, "stack not a single value at STOP", op_at); goto done; }
            if (pos != size) { decline(doc, "bytes after STOP", op_at); goto done; }
            doc->root = stack[0];
            rc = 0;
            goto done;
        case '(': /* MARK */
            if (mp == marks_cap) {
                size_t *g = realloc(marks, 2 * marks_cap * sizeof *g);
                if (!g) { decline(doc, "out of memory", op_at); goto done; }
                marks = g;
                marks_cap *= 2;
            }
            marks[mp++] = sp;
            break;
        /* None, True and False are immutable: one node each per document. */
        case 'N': PUSH(single[0] ? single[0] : (single[0] = new_node(doc, FP_NONE))); break;
        case 0x88: PUSH(single[1] ? single[1] : (single[1] = new_node(doc, FP_TRUE))); break;
        case 0x89: PUSH(single[2] ? single[2] : (single[2] = new_node(doc, FP_FALSE))); break;
        case 'J': case 'K': case 'M': { /* BININT, BININT1, BININT2 */
            int k = op == 'J' ? 4 : op == 'K' ? 1 : 2;
            NEED(k);
            uint64_t v = le(data + pos, k);
            pos += k;
            fp_node *n = new_node(doc, FP_INT);
            if (n) n->u.i = op == 'J' ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
            PUSH(n);
            break;
        }
        case 0x8a: case 0x8b: { /* LONG1, LONG4: two's complement, little-endian */
            int k = op == 0x8a ? 1 : 4;
            NEED(k);
            uint64_t nbytes = le(data + pos, k);
            pos += k;
            if (nbytes > 8) { decline(doc, "integer beyond 64 bits", op_at); goto done; }
            NEED(nbytes);
            uint64_t v = le(data + pos, (int)nbytes);
            if (nbytes && nbytes < 8 && (data[pos + nbytes - 1] & 0x80))
                v |= ~(uint64_t)0 << (8 * nbytes);
            pos += nbytes;
            fp_node *n = new_node(doc, FP_INT);
            if (n) n->u.i = (int64_t)v;
            PUSH(n);
            break;
        }
        case 'G': { /* BINFLOAT: big-endian IEEE double */
            NEED(8);
            uint64_t bits = 0;
            for (int i = 0; i < 8; i++) bits = (bits << 8) | data[pos + i];
            pos += 8;
            fp_node *n = new_node(doc, FP_FLOAT);
            if (n) memcpy(&n->u.f, &bits, sizeof bits);
            PUSH(n);
            break;
        }
        case 0x8c: case 'X': case 0x8d: { /* SHORT_BINUNICODE, BINUNICODE, BINUNICODE8 */
            int k = op == 0x8c ? 1 : op == 'X' ? 4 : 8;
            NEED(k);
            uint64_t len = le(data + pos, k);
            pos += k;
            if (len > size - pos) { decline(doc, "truncated string", op_at); goto done; }
            if (len > UINT32_MAX) { decline(doc, "string too long", op_at); goto done; }
            if (!valid_utf8(data + pos, (size_t)len)) { decline(doc, "string not strict UTF-8", op_at); goto done; }
            fp_node *n = new_node(doc, FP_STR);
            if (n) { n->u.s = (const char *)data + pos; n->len = (uint32_t)len; }
            pos += len;
            PUSH(n);
            break;
        }
        case ']': PUSH(new_node(doc, FP_LIST)); break;
        case '}': PUSH(new_node(doc, FP_DICT)); break;
        case ')': PUSH(new_node(doc, FP_TUPLE)); break;
        case 'a': { /* APPEND */
            UNDER(2);
            fp_node *list = stack[sp - 2];
            if (list->tag != FP_LIST) { decline(doc, "APPEND to a non-list", op_at); goto done; }
            if (add_items(doc, list, &stack[sp - 1], 1)) { decline(doc, "out of memory", op_at); goto done; }
            sp--;
            break;
        }
        case 'e': case 'u': case 't': { /* APPENDS, SETITEMS, TUPLE: the items above the mark */
            if (!mp) { decline(doc, "no mark", op_at); goto done; }
            size_t m = marks[--mp];
            size_t count = sp - m;
            fp_node *target;
            if (op == 't') {
                target = new_node(doc, FP_TUPLE);
                if (!target) { decline(doc, "out of memory", op_at); goto done; }
            } else {
                if (m == 0 || m <= FENCE) { decline(doc, "stack underflow", op_at); goto done; }
                target = stack[m - 1];
                if (target->tag != (op == 'e' ? FP_LIST : FP_DICT)) {
                    decline(doc, "APPENDS/SETITEMS on the wrong type", op_at);
                    goto done;
                }
                if (op == 'u') {
                    if (count % 2) { decline(doc, "odd SETITEMS", op_at); goto done; }
                    for (size_t i = m; i < sp; i += 2)
                        if (stack[i]->tag != FP_STR) { decline(doc, "dict key not a str", op_at); goto done; }
                }
            }
            if (count && add_items(doc, target, &stack[m], count)) { decline(doc, "out of memory", op_at); goto done; }
            sp = m;
            if (op == 't') PUSH(target);
            break;
        }
        case 's': { /* SETITEM */
            UNDER(3);
            fp_node *d = stack[sp - 3];
            if (d->tag != FP_DICT) { decline(doc, "SETITEM on a non-dict", op_at); goto done; }
            if (stack[sp - 2]->tag != FP_STR) { decline(doc, "dict key not a str", op_at); goto done; }
            if (add_items(doc, d, &stack[sp - 2], 2)) { decline(doc, "out of memory", op_at); goto done; }
            sp -= 2;
            break;
        }
        case 0x85: case 0x86: case 0x87: { /* TUPLE1, TUPLE2, TUPLE3 */
            size_t k = (size_t)(op - 0x84);
            UNDER(k);
            fp_node *t = new_node(doc, FP_TUPLE);
            if (!t || add_items(doc, t, &stack[sp - k], k)) { decline(doc, "out of memory", op_at); goto done; }
            sp -= k;
            PUSH(t);
            break;
        }
        case 'q': case 'r': case 0x94: { /* BINPUT, LONG_BINPUT, MEMOIZE */
            size_t idx;
            if (op == 0x94) {
                idx = doc->memo_filled;  /* MEMOIZE: Python's memo length, the filled slots */
            } else {
                int k = op == 'q' ? 1 : 4;
                NEED(k);
                idx = (size_t)le(data + pos, k);
                pos += k;
            }
            UNDER(1);
            /* An index far beyond what the bytes could have filled is declined, not allocated. */
            if (idx > size + 16) { decline(doc, "memo index out of range", op_at); goto done; }
            if (idx >= doc->memo_cap) {
                size_t cap = doc->memo_cap ? doc->memo_cap : 64;
                while (cap <= idx) cap *= 2;
                fp_node **g = realloc(doc->memo, cap * sizeof *g);
                if (!g) { decline(doc, "out of memory", op_at); goto done; }
                memset(g + doc->memo_cap, 0, (cap - doc->memo_cap) * sizeof *g);
                doc->memo = g;
                doc->memo_cap = cap;
            }
            if (!doc->memo[idx]) doc->memo_filled++;
            doc->memo[idx] = stack[sp - 1];
            break;
        }
        case 'h': case 'j': { /* BINGET, LONG_BINGET */
            int k = op == 'h' ? 1 : 4;
            NEED(k);
            size_t idx = (size_t)le(data + pos, k);
            pos += k;
            if (idx >= doc->memo_cap || !doc->memo[idx]) { decline(doc, "memo key missing", op_at); goto done; }
            PUSH(doc->memo[idx]);
            break;
        }
        default:
            /* Every other opcode, among them GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ,
             * NEWOBJ(_EX), EXT1/2/4, PERSID, BINPERSID, the buffers, bytes, sets and the
             * protocol 0/1 forms: not what a dump of plain data is made of. */
            decline(doc, "opcode not handled", op_at);
            goto done;
        }
    }
    decline(doc, "truncated (no STOP)", pos);
done:
    free(stack);
    free(marks);
    return rc;
#undef NEED
#undef FENCE
#undef PUSH
#undef UNDER
}

int fp_spend(fp_doc *doc, size_t steps) {
    if (doc->budget < steps) {
        doc->budget = 0;
        return 0;
    }
    doc->budget -= steps;
    return 1;
}

static int str_is(const fp_node *n, const char *s) {
    size_t len = strlen(s);
    return n->tag == FP_STR && n->len == len && memcmp(n->u.s, s, len) == 0;
}

fp_node *fp_dict_get(const fp_node *d, const char *key) {
    if (!d || d->tag != FP_DICT) return NULL;
    fp_node *found = NULL;
    for (uint32_t i = 0; i + 1 < d->len; i += 2)
        if (str_is(d->u.items[i], key)) found = d->u.items[i + 1];
    return found;
}

int fp_plain(fp_doc *doc, const fp_node *n, int depth) {
    if (depth > FP_MAX_DEPTH || !fp_spend(doc, 1)) return 0;
    if (n->tag == FP_LIST || n->tag == FP_TUPLE || n->tag == FP_DICT)
        for (uint32_t i = 0; i < n->len; i++)
            if (!fp_plain(doc, n->u.items[i], depth + 1)) return 0;
    return 1;
}

/* ---------------------------------------------------------------- structural interning */

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdULL;
}

/* Structural hash with the type in it (1, 1.0 and True hash apart: the Python reader turns
 * them into different text). 0 when too deep (a cycle, or deeper than any dump). */
static int node_hash(const fp_node *cn, int depth, uint64_t *out) {
    fp_node *n = (fp_node *)cn;
    if (n->hashed) { *out = n->hash; return 1; }
    if (depth > FP_MAX_DEPTH) return 0;
    uint64_t h = mix(0x12345, n->tag);
    switch (n->tag) {
    case FP_INT: h = mix(h, (uint64_t)n->u.i); break;
    case FP_FLOAT: { uint64_t bits; memcpy(&bits, &n->u.f, sizeof bits); h = mix(h, bits); break; }
    case FP_STR:
        h = mix(h, n->len);
        for (uint32_t i = 0; i < n->len; i++) h = (h ^ (uint8_t)n->u.s[i]) * 0x100000001b3ULL;
        break;
    case FP_LIST: case FP_TUPLE: case FP_DICT:
        h = mix(h, n->len);
        for (uint32_t i = 0; i < n->len; i++) {
            uint64_t c;
            if (!node_hash(n->u.items[i], depth + 1, &c)) return 0;
            h = mix(h, c);
        }
        break;
    default: break;
    }
    n->hash = h;
    n->hashed = 1;
    *out = h;
    return 1;
}

/* 1 equal, 0 different, -1 budget exhausted. Equal means the same Python value of the same
 * types (dicts compared item by item in order: two dicts equal as Python values may still
 * compare different here, which only splits a distinct value in two). */
static int node_equal(fp_doc *doc, const fp_node *a, const fp_node *b, int depth) {
    if (a == b) return 1;
    if (!fp_spend(doc, 1) || depth > FP_MAX_DEPTH) return -1;
    if (a->tag != b->tag || a->len != b->len || a->hash != b->hash) return 0;
    switch (a->tag) {
    case FP_INT: return a->u.i == b->u.i;
    case FP_FLOAT: return memcmp(&a->u.f, &b->u.f, sizeof a->u.f) == 0;
    case FP_STR: return memcmp(a->u.s, b->u.s, a->len) == 0;
    case FP_LIST: case FP_TUPLE: case FP_DICT:
        for (uint32_t i = 0; i < a->len; i++) {
            int r = node_equal(doc, a->u.items[i], b->u.items[i], depth + 1);
            if (r != 1) return r;
        }
        return 1;
    default: return 1;
    }
}

/* The code of ``v`` in object column ``k``: its index among the distinct values so far. */
static int64_t intern(fp_doc *doc, fp_cols *c, int k, fp_node *v) {
    if (c->last_node[k] == v) return c->last_code[k];
    uint64_t h;
    if (!node_hash(v, 0, &h)) return -1;
    if (c->n_distinct[k] * 2 >= c->table_cap[k]) {
        size_t cap = c->table_cap[k] ? c->table_cap[k] * 2 : 64;
        uint32_t *t = malloc(cap * sizeof *t);
        if (!t) return -1;
        memset(t, 0xff, cap * sizeof *t);
        for (size_t i = 0; i < c->n_distinct[k]; i++) {
            size_t j = c->distinct[k][i]->hash & (cap - 1);
            while (t[j] != UINT32_MAX) j = (j + 1) & (cap - 1);
            t[j] = (uint32_t)i;
        }
        free(c->table[k]);
        c->table[k] = t;
        c->table_cap[k] = cap;
    }
    size_t mask = c->table_cap[k] - 1, j = h & mask;
    while (c->table[k][j] != UINT32_MAX) {
        uint32_t code = c->table[k][j];
        int r = node_equal(doc, c->distinct[k][code], v, 0);
        if (r == 1) {
            c->last_node[k] = v;
            c->last_code[k] = (int32_t)code;
            return code;
        }
        if (r < 0) return -1;
        j = (j + 1) & mask;
    }
    if (c->n_distinct[k] == c->distinct_cap[k]) {
        size_t cap = c->distinct_cap[k] ? c->distinct_cap[k] * 2 : 16;
        fp_node **g = realloc(c->distinct[k], cap * sizeof *g);
        if (!g) return -1;
        c->distinct[k] = g;
        c->distinct_cap[k] = cap;
    }
    /* A value seen for the first time must be plain data (checked once per distinct value). */
    if (!fp_plain(doc, v, 0)) return -1;
    size_t code = c->n_distinct[k]++;
    c->distinct[k][code] = v;
    c->table[k][j] = (uint32_t)code;
    c->last_node[k] = v;
    c->last_code[k] = (int32_t)code;
    return (int64_t)code;
}

static int field_of(fp_node *key) {
    if (key->field == -2) {
        key->field = -1;
        for (int f = 0; f < FP_N_FIELDS; f++)
            if (str_is(key, fp_field_names[f])) { key->field = (int16_t)f; break; }
    }
    return key->field;
}

int fp_columns(fp_doc *doc, fp_cols *c) {
    memset(c, 0, sizeof *c);
    fp_node *root = doc->root;
    if (!root || root->tag != FP_DICT) return decline(doc, "top level not a dict", 0);
    if (!fp_dict_get(root, "version")) return decline(doc, "no version", 0);
    fp_node *entries = fp_dict_get(root, "entries");
    size_t n = 0;
    if (entries && entries->tag == FP_LIST) n = entries->len;
    else if (entries && entries->tag != FP_NONE) return decline(doc, "entries not a list", 0);
    if (n > doc->size / FP_BYTES_PER_ENTRY) return decline(doc, "more entries than the bytes could hold", 0);
    c->n = n;
    size_t alloc = n ? n : 1;
    for (int k = 0; k < FP_N_INTS; k++)
        if (!(c->ints[k] = malloc(alloc * sizeof(int64_t)))) return decline(doc, "out of memory", 0);
    for (int k = 0; k < 2; k++)
        if (!(c->bools[k] = malloc(alloc))) return decline(doc, "out of memory", 0);
    if (!(c->floats = malloc(alloc * sizeof(double)))) return decline(doc, "out of memory", 0);
    for (int k = 0; k < FP_N_OBJECTS; k++)
        if (!(c->codes[k] = malloc(alloc * sizeof(int32_t)))) return decline(doc, "out of memory", 0);

    fp_node *none_node = new_node(doc, FP_NONE);  /* stands for a missing key */
    if (!none_node) return decline(doc, "out of memory", 0);
    fp_node *slot[FP_N_FIELDS];
    for (size_t e = 0; e < n; e++) {
        fp_node *entry = entries->u.items[e];
        if (entry->tag != FP_DICT) return decline(doc, "entry not a dict", 0);
        for (int f = 0; f < FP_N_FIELDS; f++) slot[f] = NULL;
        for (uint32_t i = 0; i + 1 < entry->len; i += 2) {
            int f = field_of(entry->u.items[i]);
            if (f >= 0) slot[f] = entry->u.items[i + 1];  /* the last one set wins, as in a dict */
        }
        for (int f = 0; f < FP_N_INTS; f++) {
            fp_node *v = slot[f];
            int64_t x;
            if (!v || v->tag == FP_NONE) x = fp_int_defaults[f];
            else if (v->tag == FP_INT) x = v->u.i;
            else return decline(doc, "int field of another type", 0);
            c->ints[f][e] = x;
            if (e == 0 || x < c->lo[f]) c->lo[f] = x;
            if (e == 0 || x > c->hi[f]) c->hi[f] = x;
        }
        for (int b = 0; b < 2; b++) {
            fp_node *v = slot[FP_IS_P2P + b];
            if (!v || v->tag == FP_NONE || v->tag == FP_FALSE) c->bools[b][e] = 0;
            else if (v->tag == FP_TRUE) c->bools[b][e] = 1;
            else return decline(doc, "bool field of another type", 0);
        }
        fp_node *d = slot[FP_DURATION];
        if (!d || d->tag == FP_NONE) c->floats[e] = NAN;
        else if (d->tag == FP_FLOAT) c->floats[e] = d->u.f;
        else if (d->tag == FP_INT) c->floats[e] = (double)d->u.i;
        else return decline(doc, "duration of another type", 0);
        for (int k = 0; k < FP_N_OBJECTS; k++) {
            fp_node *v = slot[FP_FIRST_OBJECT + k];
            int64_t code = intern(doc, c, k, v ? v : none_node);
            if (code < 0) return decline(doc, "value too deep, cyclic or too costly", 0);
            c->codes[k][e] = (int32_t)code;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- canonical bytes */

static int buf_put(fp_buf *b, const void *src, size_t n) {
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > ((size_t)1 << 40)) return 0;
            cap *= 2;
        }
        uint8_t *g = realloc(b->p, cap);
        if (!g) return 0;
        b->p = g;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 1;
}

static int buf_u32(fp_buf *b, uint32_t v) {
    uint8_t le4[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return buf_put(b, le4, 4);
}

int fp_serialize(fp_doc *doc, const fp_node *n, int depth, fp_buf *b) {
    if (depth > FP_MAX_DEPTH || !fp_spend(doc, 1)) return 0;
    static const char tags[] = {'N', 'F', 'T', 'i', 'f', 's', 'l', 't', 'd'};
    if (n->tag > FP_DICT) return 0;
    uint8_t tag = (uint8_t)tags[n->tag];
    if (!buf_put(b, &tag, 1)) return 0;
    switch (n->tag) {
    case FP_INT: case FP_FLOAT: {
        uint64_t bits;
        memcpy(&bits, &n->u, sizeof bits);
        uint8_t le8[8];
        for (int i = 0; i < 8; i++) le8[i] = (uint8_t)(bits >> (8 * i));
        return buf_put(b, le8, 8);
    }
    case FP_STR:
        return buf_u32(b, n->len) && buf_put(b, n->u.s, n->len);
    case FP_LIST: case FP_TUPLE: case FP_DICT:
        if (!buf_u32(b, n->len)) return 0;
        for (uint32_t i = 0; i < n->len; i++)
            if (!fp_serialize(doc, n->u.items[i], depth + 1, b)) return 0;
        return 1;
    default:
        return 1;
    }
}

void fp_buf_free(fp_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

void fp_cols_free(fp_cols *c) {
    for (int k = 0; k < FP_N_INTS; k++) free(c->ints[k]);
    for (int k = 0; k < 2; k++) free(c->bools[k]);
    free(c->floats);
    for (int k = 0; k < FP_N_OBJECTS; k++) {
        free(c->codes[k]);
        free(c->distinct[k]);
        free(c->table[k]);
    }
    memset(c, 0, sizeof *c);
}

void fp_doc_free(fp_doc *doc) {
    fp_chunk *c = doc->chunks;
    while (c) {
        fp_chunk *next = c->next;
        free(c);
        c = next;
    }
    fp_block *b = doc->blocks;
    while (b) {
        fp_block *next = b->next;
        free(b);
        b = next;
    }
    free(doc->memo);
    memset(doc, 0, sizeof *doc);
}
