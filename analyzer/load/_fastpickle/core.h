/* Pickle -> columns for flight-recorder dumps, without the Python interpreter.
 *
 * The core implements the few pickle opcodes PyTorch's and Python's picklers emit for plain
 * data (protocol 2 to 5: dicts, lists, tuples, str, int, float, bool, None, memo) and declines
 * everything else. There is no opcode here that names a global, an extension code, a
 * persistent id or a buffer: such a file is declined and the Python reader (which refuses
 * every global) says why. "Declined" is never an error of the dump: it means "not the shape a
 * real dump has; let the reference reader decide".
 *
 * Bounds: files above FP_MAX_BYTES are declined; every declared length is checked against the
 * bytes left; the memo index is bounded
 * by the input size; the value and mark stacks grow by at most one slot per input byte; every
 * recursive walk (hashing, comparing, converting) is bounded in depth, and comparing and
 * converting share a step budget proportional to the input size.
 */
#ifndef HANGSCOPE_FASTPICKLE_CORE_H
#define HANGSCOPE_FASTPICKLE_CORE_H

#include <stddef.h>
#include <stdint.h>

enum fp_tag {
    FP_NONE = 0, FP_FALSE, FP_TRUE, FP_INT, FP_FLOAT, FP_STR, FP_LIST, FP_TUPLE, FP_DICT
};

typedef struct fp_node fp_node;
struct fp_node {
    uint8_t tag;
    uint8_t hashed;      /* hash below is valid */
    int16_t field;       /* str used as an entry key: cached field index (-2: not looked up) */
    uint32_t len;        /* str: bytes; list/tuple: items; dict: 2 x pairs */
    uint32_t cap;        /* allocated item slots (list, dict) */
    uint64_t hash;
    union {
        int64_t i;
        double f;
        const char *s;   /* points into the input buffer */
        fp_node **items; /* dict: key, value, key, value, ... */
    } u;
};

/* The entry fields the reader extracts, in column order. */
enum {
    /* int64 columns */
    FP_RECORD_ID, FP_PG_ID, FP_SEQ, FP_P2P_SEQ, FP_OP_ID, FP_TIME_CREATED, FP_TIME_STARTED,
    FP_TIME_COMPLETED, FP_TIMEOUT_MS,
    FP_N_INTS,
    /* bool columns */
    FP_IS_P2P = FP_N_INTS, FP_RETIRED,
    /* float column */
    FP_DURATION,
    /* object columns: codes into distinct values (by structure, in order of first use) */
    FP_PROFILING_NAME, FP_PROCESS_GROUP, FP_INPUT_SIZES, FP_OUTPUT_SIZES, FP_INPUT_DTYPES,
    FP_OUTPUT_DTYPES, FP_STATE, FP_THREAD_NAME, FP_FRAMES,
    FP_N_FIELDS
};
#define FP_FIRST_OBJECT FP_PROFILING_NAME
#define FP_N_OBJECTS (FP_N_FIELDS - FP_FIRST_OBJECT)

extern const char *const fp_field_names[FP_N_FIELDS];
extern const int64_t fp_int_defaults[FP_N_INTS];

typedef struct fp_chunk fp_chunk;
typedef struct fp_block fp_block;

typedef struct {
    const uint8_t *data;
    size_t size;
    fp_node *root;
    fp_chunk *chunks;     /* node arena */
    fp_block *blocks;     /* item slots of lists, tuples and dicts (newest first) */
    fp_node **memo;
    size_t memo_cap;      /* allocated slots */
    size_t memo_filled;   /* filled slots (the index MEMOIZE uses) */
    size_t budget;        /* steps left for comparing and converting */
    const char *why;      /* reason of a decline */
    size_t where;         /* byte offset of the decline, when it is about an opcode */
} fp_doc;

typedef struct {
    size_t n;                       /* entries */
    int64_t *ints[FP_N_INTS];
    int64_t lo[FP_N_INTS], hi[FP_N_INTS];  /* smallest and largest value of each (n > 0) */
    uint8_t *bools[2];
    double *floats;
    int32_t *codes[FP_N_OBJECTS];
    fp_node **distinct[FP_N_OBJECTS];
    size_t n_distinct[FP_N_OBJECTS];
    /* internal: one open-addressing table per object column, and the node interned last
     * (consecutive entries often share one memoized value) */
    uint32_t *table[FP_N_OBJECTS];
    const fp_node *last_node[FP_N_OBJECTS];
    int32_t last_code[FP_N_OBJECTS];
    size_t table_cap[FP_N_OBJECTS];
    size_t distinct_cap[FP_N_OBJECTS];
} fp_cols;

/* Parse a whole pickle. 0 on success (doc->root set), -1 when declined (doc->why). */
int fp_parse(fp_doc *doc, const uint8_t *data, size_t size);
/* The entry columns of a parsed dump. 0 on success, -1 when declined (doc->why). */
int fp_columns(fp_doc *doc, fp_cols *cols);
/* The value of str key ``key`` in dict ``d`` (the last one set), or NULL. */
fp_node *fp_dict_get(const fp_node *d, const char *key);
/* True when ``n`` and everything under it is plain data of depth <= FP_MAX_DEPTH with
 * str-keyed dicts (the values of every entry's object fields are checked this way). */
int fp_plain(fp_doc *doc, const fp_node *n, int depth);
/* Spend ``steps`` of the budget; 0 when exhausted (the walk must decline). */
int fp_spend(fp_doc *doc, size_t steps);
void fp_cols_free(fp_cols *cols);

/* A growing byte buffer. */
typedef struct {
    uint8_t *p;
    size_t len, cap;
} fp_buf;
/* Append the canonical bytes of plain value ``n`` to ``b``: a tag byte ('N' None, 'T' True,
 * 'F' False, 'i' int64, 'f' float64, 's' str, 'l' list, 't' tuple, 'd' dict), then for
 * int/float 8 little-endian bytes, for str a 4-byte length and the UTF-8 bytes, for
 * containers a 4-byte item count (dict: 2 x pairs) and the items. Two values have equal
 * bytes exactly when they are the same Python value of the same types (dicts in order), as
 * node_equal compares them. Spends the budget like a walk; 0 when too deep, costly or out
 * of memory. */
int fp_serialize(fp_doc *doc, const fp_node *n, int depth, fp_buf *b);
void fp_buf_free(fp_buf *b);
void fp_doc_free(fp_doc *doc);

#define FP_MAX_DEPTH 32
/* Larger files go to the Python reader. Memory is at most about 100 bytes per input byte
 * (a 32-byte node per opcode, a stack slot and up to four item slots per push (a container
 * that grows away from the newest slots leaves its old ones behind), two memo slots per
 * byte, and the columns, whose entries are bounded by FP_BYTES_PER_ENTRY), so ~3 GB for a
 * crafted file at the cap; a real dump of 2,000 entries is about 250 KB and needs ~3 MB. */
#define FP_MAX_BYTES ((size_t)32 << 20)
/* A real entry takes 80 bytes or more (a dict of ~20 keys); a list of more entries than
 * size / FP_BYTES_PER_ENTRY (references to one memoized dict) is declined. */
#define FP_BYTES_PER_ENTRY 16

#endif
