/* analyzer.kernels._groupkeys: the integer group-by kernels of analyzer/kernels/group_by.py in one pass
 * each, over contiguous int64 buffers (numpy arrays), without the temporaries of the numpy
 * versions (which stay as the reference, used where this module is not built).
 *
 * ranged_ids(major, minor, n_major, limit, out) -> number of distinct pairs, or -1
 *   (major and minor: signed integers of 1, 2, 4 or 8 bytes; out: int64.) Dense ids of the rows' (major, minor) pairs in sorted pair order, written to out: each
 *   major gets a range of slots as wide as the span of its minors, used slots are numbered
 *   in order: a bit per slot and a running count per 64 slots (0.19 bytes a slot, where an
 *   id per slot would be 8: the slots may be several times the rows). -1 (out untouched) when the spans add up to more than `limit` slots or reach
 *   beyond +-2^59: the caller sorts instead.
 * reduce_at(op, ids, values, out) -> None
 *   out[ids[i]] = min (op 0) or max (op 1) of out[ids[i]] and values[i], as numpy's
 *   minimum.at / maximum.at; op 2: out[ids[i]] = i where out[ids[i]] is still len(ids)
 *   (the first row of each id, as minimum.at(out, ids, arange(n))).
 * remap_into(codes, remaps, out) -> values written
 *   codes and remaps: lists of arrays, pair by pair (codes: signed integers of any width;
 *   remaps: int32); out (int8 to int64): each pair's remap[code], the pairs laid end to end.
 *   A code outside its remap, or more values than out holds, raises ValueError.
 * first_at(ids, values, target, out) -> None
 *   out[ids[i]] = i where values[i] == target[ids[i]] and out[ids[i]] is still len(ids): the
 *   first row of each id whose value is the id's target (its largest, say).
 *
 * Every index is checked against its buffer: a bad one raises ValueError and nothing is
 * written out of bounds (reduce_at may have reduced the rows before it). The GIL is
 * released around the loops.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LIMIT ((int64_t)1 << 59)

typedef struct {
    Py_buffer view;
    int64_t *data;
    Py_ssize_t n;
    int held;
} i64buf;

/* The width of a buffer of signed integers in native order (1, 2, 4 or 8 bytes), 0 for any
 * other buffer. */
static int signed_width(const Py_buffer *v) {
    const char *f = v->format ? v->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    int w = (int)v->itemsize;
    return f[0] && !f[1] && strchr("bhilq", f[0]) && (w == 1 || w == 2 || w == 4 || w == 8) ? w : 0;
}

static int get_i64(PyObject *obj, i64buf *b, int writable, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    b->held = 0;
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) return -1;
    b->held = 1;
    if (signed_width(&b->view) != 8) {
        PyErr_Format(PyExc_TypeError, "%s: an int64 array is needed", name);
        return -1;
    }
    b->data = (int64_t *)b->view.buf;
    b->n = b->view.len / 8;
    return 0;
}

/* A buffer of signed integers of any width, read (at) or written (put) as int64. */
typedef struct {
    Py_buffer view;
    void *data;
    Py_ssize_t n;
    int width, held;
} intbuf;

static int get_int(PyObject *obj, intbuf *b, int writable, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    b->held = 0;
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) return -1;
    b->held = 1;
    if (!(b->width = signed_width(&b->view))) {
        PyErr_Format(PyExc_TypeError, "%s: an array of signed integers is needed", name);
        return -1;
    }
    b->data = b->view.buf;
    b->n = b->view.len / b->view.itemsize;
    return 0;
}

static inline int64_t at(const intbuf *b, Py_ssize_t i) {
    switch (b->width) {
    case 1: return ((const int8_t *)b->data)[i];
    case 2: return ((const int16_t *)b->data)[i];
    case 4: return ((const int32_t *)b->data)[i];
    default: return ((const int64_t *)b->data)[i];
    }
}

static void release_int(intbuf *b) {
    if (b->held) PyBuffer_Release(&b->view);
    b->held = 0;
}

static void release(i64buf *b) {
    if (b->held) PyBuffer_Release(&b->view);
    b->held = 0;
}

/* With the popcnt instruction where the processor has it (gcc picks the clone at load). */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define POPCNT_CLONES __attribute__((target_clones("popcnt", "default")))
#else
#define POPCNT_CLONES
#endif

/* ranged_ids' numbering: a bit per used slot (base[m] + minor: the slot of a row of major m),
 * a running count before each word, each row's id its slot's rank among the used ones.
 * Returns 1 when a row falls outside the slots (the buffers changed under the released GIL:
 * in range by construction otherwise), 0 when done; *count: the used slots. */
POPCNT_CLONES
static int number_slots(const intbuf *major, const intbuf *minor, const int64_t *base,
                        Py_ssize_t n_major, int64_t total, uint64_t *bits, int64_t *before,
                        size_t words, int64_t *out, int64_t *count) {
    Py_ssize_t n = major->n;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t m = (uint64_t)at(major, i);
        uint64_t s = (uint64_t)(base[m < (uint64_t)n_major ? m : 0] + at(minor, i));
        if (m >= (uint64_t)n_major || s >= (uint64_t)total) return 1;
        bits[s >> 6] |= (uint64_t)1 << (s & 63);
    }
    int64_t used = 0;
    for (size_t w = 0; w < words; w++) {
        before[w] = used;
        used += __builtin_popcountll(bits[w]);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t m = (uint64_t)at(major, i);
        uint64_t s = (uint64_t)(base[m < (uint64_t)n_major ? m : 0] + at(minor, i));
        if (m >= (uint64_t)n_major || s >= (uint64_t)total) return 1;
        uint64_t below = bits[s >> 6] & (((uint64_t)1 << (s & 63)) - 1);
        out[i] = before[s >> 6] + __builtin_popcountll(below);
    }
    *count = used;
    return 0;
}

static PyObject *ranged_ids(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_major, *o_minor, *o_out;
    Py_ssize_t n_major, limit;
    if (!PyArg_ParseTuple(args, "OOnnO", &o_major, &o_minor, &n_major, &limit, &o_out)) return NULL;
    if (n_major < 1 || limit < 0) {
        PyErr_SetString(PyExc_ValueError, "ranged_ids: n_major must be positive, limit non-negative");
        return NULL;
    }
    intbuf major = {0}, minor = {0};
    i64buf out = {0};
    int64_t *lo = NULL, *hi = NULL, *before = NULL;
    uint64_t *bits = NULL;
    PyObject *result = NULL;
    if (get_int(o_major, &major, 0, "major") < 0 || get_int(o_minor, &minor, 0, "minor") < 0
        || get_i64(o_out, &out, 1, "out") < 0)
        goto done;
    Py_ssize_t n = major.n;
    if (minor.n != n || out.n != n) {
        PyErr_SetString(PyExc_ValueError, "ranged_ids: major, minor and out differ in length");
        goto done;
    }
    lo = malloc((size_t)n_major * sizeof *lo);
    hi = malloc((size_t)n_major * sizeof *hi);
    if (!lo || !hi) { PyErr_NoMemory(); goto done; }
    int bad = 0;
    int64_t total = 0, ids = 0;
    int sparse = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t m = 0; m < n_major; m++) { lo[m] = INT64_MAX; hi[m] = INT64_MIN; }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t m = at(&major, i), v = at(&minor, i);
        if (m < 0 || m >= n_major) { bad = 1; break; }
        if (v < lo[m]) lo[m] = v;
        if (v > hi[m]) hi[m] = v;
    }
    if (!bad) {
        /* lo[m] becomes the slot of (m, 0): the major's offset less its lowest minor. */
        for (Py_ssize_t m = 0; m < n_major && !sparse; m++) {
            if (lo[m] > hi[m]) continue;
            if (lo[m] <= -LIMIT || hi[m] >= LIMIT) { sparse = 1; break; }
            int64_t span = hi[m] - lo[m] + 1;
            if (span > (int64_t)limit - total) { sparse = 1; break; }
            lo[m] = total - lo[m];
            total += span;
        }
    }
    size_t words = (size_t)(total + 63) / 64 + 1;
    if (!bad && !sparse) {
        bits = calloc(words, sizeof *bits);
        before = malloc(words * sizeof *before);
    }
    if (bits && before) bad = number_slots(&major, &minor, lo, n_major, total, bits, before, words,
                                           out.data, &ids);
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "ranged_ids: a major code outside 0..n_major-1 "
                        "(or the arrays changed while read)");
        goto done;
    }
    if (sparse) { result = PyLong_FromLong(-1); goto done; }
    if (!bits || !before) { PyErr_NoMemory(); goto done; }
    result = PyLong_FromLongLong(ids);
done:
    free(lo);
    free(hi);
    free(bits);
    free(before);
    release_int(&major);
    release_int(&minor);
    release(&out);
    return result;
}

static PyObject *reduce_at(PyObject *self, PyObject *args) {
    (void)self;
    int op;
    PyObject *o_ids, *o_values, *o_out;
    if (!PyArg_ParseTuple(args, "iOOO", &op, &o_ids, &o_values, &o_out)) return NULL;
    if (op < 0 || op > 2) {
        PyErr_SetString(PyExc_ValueError, "reduce_at: op is 0 (min), 1 (max) or 2 (first row)");
        return NULL;
    }
    i64buf ids = {0}, values = {0}, out = {0};
    PyObject *result = NULL;
    if (get_i64(o_ids, &ids, 0, "ids") < 0 || get_i64(o_out, &out, 1, "out") < 0) goto done;
    if (op != 2) {
        if (get_i64(o_values, &values, 0, "values") < 0) goto done;
        if (values.n != ids.n) {
            PyErr_SetString(PyExc_ValueError, "reduce_at: ids and values differ in length");
            goto done;
        }
    }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    const int64_t *k = ids.data, *v = values.data;
    int64_t *o = out.data;
    Py_ssize_t n = ids.n, m = out.n;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t g = k[i];
        if (g < 0 || g >= m) { bad = 1; break; }
        if (op == 0) { if (v[i] < o[g]) o[g] = v[i]; }
        else if (op == 1) { if (v[i] > o[g]) o[g] = v[i]; }
        else if (o[g] == n) o[g] = i;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "reduce_at: an id outside the output");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    release(&ids);
    release(&values);
    release(&out);
    return result;
}

static PyObject *first_at(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_ids, *o_values, *o_target, *o_out;
    if (!PyArg_ParseTuple(args, "OOOO", &o_ids, &o_values, &o_target, &o_out)) return NULL;
    i64buf ids = {0}, values = {0}, target = {0}, out = {0};
    PyObject *result = NULL;
    if (get_i64(o_ids, &ids, 0, "ids") < 0 || get_i64(o_values, &values, 0, "values") < 0
        || get_i64(o_target, &target, 0, "target") < 0 || get_i64(o_out, &out, 1, "out") < 0)
        goto done;
    if (values.n != ids.n || target.n != out.n) {
        PyErr_SetString(PyExc_ValueError, "first_at: ids and values, or target and out, differ in length");
        goto done;
    }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    const int64_t *k = ids.data, *v = values.data, *t = target.data;
    int64_t *o = out.data;
    Py_ssize_t n = ids.n, m = out.n;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t g = k[i];
        if (g < 0 || g >= m) { bad = 1; break; }
        if (v[i] == t[g] && o[g] == n) o[g] = i;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "first_at: an id outside the output");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    release(&ids);
    release(&values);
    release(&target);
    release(&out);
    return result;
}

/* out (any signed width) at i: v. */
static inline void put(void *out, int width, Py_ssize_t i, int64_t v) {
    switch (width) {
    case 1: ((int8_t *)out)[i] = (int8_t)v; break;
    case 2: ((int16_t *)out)[i] = (int16_t)v; break;
    case 4: ((int32_t *)out)[i] = (int32_t)v; break;
    default: ((int64_t *)out)[i] = v; break;
    }
}

static PyObject *remap_into(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_codes, *o_remaps, *o_out;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyList_Type, &o_codes, &PyList_Type, &o_remaps, &o_out))
        return NULL;
    Py_ssize_t pairs = PyList_GET_SIZE(o_codes);
    if (PyList_GET_SIZE(o_remaps) != pairs) {
        PyErr_SetString(PyExc_ValueError, "remap_into: as many remaps as code arrays are needed");
        return NULL;
    }
    intbuf out = {0};
    if (get_int(o_out, &out, 1, "out") < 0) {
        release_int(&out);
        return NULL;
    }
    Py_ssize_t at_ = 0;
    const char *why = NULL;
    for (Py_ssize_t p = 0; p < pairs && !why; p++) {
        intbuf codes = {0}, remap = {0};
        if (get_int(PyList_GET_ITEM(o_codes, p), &codes, 0, "codes") < 0
            || get_int(PyList_GET_ITEM(o_remaps, p), &remap, 0, "remaps") < 0) {
            why = "";
        } else if (remap.width != 4) {
            PyErr_SetString(PyExc_TypeError, "remap_into: remaps must be int32 arrays");
            why = "";
        } else if (codes.n > out.n - at_) {
            why = "remap_into: more values than out holds";
        } else {
            const int32_t *r = remap.data;
            int bad = 0;
            Py_BEGIN_ALLOW_THREADS  /* the other normalize thread goes on meanwhile */
            for (Py_ssize_t i = 0; i < codes.n; i++) {
                int64_t c = at(&codes, i);
                if (c < 0 || c >= remap.n) { bad = 1; break; }
                put(out.data, out.width, at_ + i, r[c]);
            }
            Py_END_ALLOW_THREADS
            if (bad) why = "remap_into: a code outside its remap";
            at_ += codes.n;
        }
        release_int(&codes);
        release_int(&remap);
    }
    release_int(&out);
    if (why) {
        if (*why) PyErr_SetString(PyExc_ValueError, why);
        return NULL;
    }
    return PyLong_FromSsize_t(at_);
}

static PyMethodDef methods[] = {
    {"ranged_ids", ranged_ids, METH_VARARGS,
     "ranged_ids(major, minor, n_major, limit, out) -> distinct pairs, or -1 when too sparse"},
    {"reduce_at", reduce_at, METH_VARARGS,
     "reduce_at(op, ids, values, out): per id, min (0), max (1) or first row (2)"},
    {"remap_into", remap_into, METH_VARARGS,
     "remap_into(codes, remaps, out) -> values written: each pair's remap[code], end to end"},
    {"first_at", first_at, METH_VARARGS,
     "first_at(ids, values, target, out): per id, the first row whose value is the id's target"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "analyzer.kernels._groupkeys",
    "Compiled group-by kernels of analyzer.kernels.group_by (int64 buffers; indices checked).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__groupkeys(void) { return PyModule_Create(&module); }
