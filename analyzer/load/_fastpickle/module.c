/* analyzer.load._fastpickle: the Python face of the compiled reader's core (core.c).
 *
 * parse(data) -> tuple on success, or a str saying why the file was declined:
 *   (top, n, ints, bools, floats, objects, bounds)
 *   top     : the top-level dict, "entries" mapped to None (small: version, pg_config...)
 *   n       : number of entries
 *   ints    : tuple of bytearrays of int64, in core.h's column order (None/missing -> default)
 *   bools   : tuple of 2 bytearrays of uint8 (is_p2p, retired)
 *   floats  : bytearray of float64 (duration_ms, NaN when None/missing)
 *   bounds  : tuple of (smallest, largest) per int column, in the order of ints ((0, -1)
 *             without entries)
 *   objects : tuple of (codes bytearray of int32, list of the distinct values' canonical
 *             bytes in order of first use) per object field (core.h's fp_serialize). No
 *             entry value becomes a Python object here: decode(key) makes one of a key
 *             whose value the caller has not met before.
 *
 * decode(key) -> the plain value (None, bool, int, float, str, list, tuple, dict) of
 * canonical bytes, or raises ValueError when they are not such bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core.h"

/* Long strings of the top-level dict (the default group's member list in pg_config names
 * every rank: 100 KB at 16k ranks) repeat from one dump to the next: the last few are kept,
 * with their bytes, and an equal string is the same str object again (its hash computed
 * once). Used with the GIL held only. */
#define LONG_STR 4096
#define LONG_SLOTS 8
static struct { char *bytes; size_t len; PyObject *str; } long_strs[LONG_SLOTS];
static unsigned long_next;

static PyObject *long_str(const char *s, size_t len) {
    for (unsigned i = 0; i < LONG_SLOTS; i++)
        if (long_strs[i].str && long_strs[i].len == len && memcmp(long_strs[i].bytes, s, len) == 0)
            return Py_NewRef(long_strs[i].str);
    PyObject *str = PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "strict");
    char *copy = str ? malloc(len) : NULL;
    if (!copy) return str;
    memcpy(copy, s, len);
    unsigned slot = long_next++ % LONG_SLOTS;
    free(long_strs[slot].bytes);
    Py_XDECREF(long_strs[slot].str);
    long_strs[slot].bytes = copy;
    long_strs[slot].len = len;
    long_strs[slot].str = Py_NewRef(str);
    return str;
}

static PyObject *to_py(fp_doc *doc, const fp_node *n, int depth) {
    if (depth > FP_MAX_DEPTH || !fp_spend(doc, 1)) return NULL;
    switch (n->tag) {
    case FP_NONE: Py_RETURN_NONE;
    case FP_TRUE: Py_RETURN_TRUE;
    case FP_FALSE: Py_RETURN_FALSE;
    case FP_INT: return PyLong_FromLongLong(n->u.i);
    case FP_FLOAT: return PyFloat_FromDouble(n->u.f);
    case FP_STR:
        if (n->len >= LONG_STR) return long_str(n->u.s, n->len);
        return PyUnicode_DecodeUTF8(n->u.s, (Py_ssize_t)n->len, "strict");
    case FP_LIST: case FP_TUPLE: {
        PyObject *out = n->tag == FP_LIST ? PyList_New(n->len) : PyTuple_New(n->len);
        if (!out) return NULL;
        for (uint32_t i = 0; i < n->len; i++) {
            PyObject *item = to_py(doc, n->u.items[i], depth + 1);
            if (!item) { Py_DECREF(out); return NULL; }
            if (n->tag == FP_LIST) PyList_SET_ITEM(out, i, item);
            else PyTuple_SET_ITEM(out, i, item);
        }
        return out;
    }
    case FP_DICT: {
        PyObject *out = PyDict_New();
        if (!out) return NULL;
        for (uint32_t i = 0; i + 1 < n->len; i += 2) {
            PyObject *k = to_py(doc, n->u.items[i], depth + 1);
            PyObject *v = k ? to_py(doc, n->u.items[i + 1], depth + 1) : NULL;
            if (!v || PyDict_SetItem(out, k, v) < 0) {
                Py_XDECREF(k); Py_XDECREF(v); Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(k); Py_DECREF(v);
        }
        return out;
    }
    default: return NULL;
    }
}

static PyObject *column(const void *data, size_t n, size_t width) {
    return PyByteArray_FromStringAndSize((const char *)data, (Py_ssize_t)(n * width));
}

static PyObject *build(fp_doc *doc, fp_cols *c, fp_buf *key) {
    PyObject *top = PyDict_New(), *ints = PyTuple_New(FP_N_INTS), *bools = PyTuple_New(2);
    PyObject *objects = PyTuple_New(FP_N_OBJECTS), *floats = NULL, *out = NULL;
    if (!top || !ints || !bools || !objects) goto fail;
    const fp_node *root = doc->root;
    for (uint32_t i = 0; i + 1 < root->len; i += 2) {
        const fp_node *key = root->u.items[i];
        /* "entries" stays as a key (the reader checks which keys a dump has), its value is
         * in the columns. */
        int is_entries = key->len == 7 && memcmp(key->u.s, "entries", 7) == 0;
        PyObject *k = to_py(doc, key, 1);
        PyObject *v = !k ? NULL : is_entries ? Py_NewRef(Py_None) : to_py(doc, root->u.items[i + 1], 1);
        if (!v || PyDict_SetItem(top, k, v) < 0) { Py_XDECREF(k); Py_XDECREF(v); goto fail; }
        Py_DECREF(k); Py_DECREF(v);
    }
    for (int k = 0; k < FP_N_INTS; k++) {
        PyObject *col = column(c->ints[k], c->n, sizeof(int64_t));
        if (!col) goto fail;
        PyTuple_SET_ITEM(ints, k, col);
    }
    for (int k = 0; k < 2; k++) {
        PyObject *col = column(c->bools[k], c->n, 1);
        if (!col) goto fail;
        PyTuple_SET_ITEM(bools, k, col);
    }
    if (!(floats = column(c->floats, c->n, sizeof(double)))) goto fail;
    for (int k = 0; k < FP_N_OBJECTS; k++) {
        PyObject *codes = column(c->codes[k], c->n, sizeof(int32_t));
        PyObject *values = PyList_New((Py_ssize_t)c->n_distinct[k]);
        if (!codes || !values) { Py_XDECREF(codes); Py_XDECREF(values); goto fail; }
        for (size_t i = 0; i < c->n_distinct[k]; i++) {
            key->len = 0;
            PyObject *v = fp_serialize(doc, c->distinct[k][i], 0, key)
                ? PyBytes_FromStringAndSize((const char *)key->p, (Py_ssize_t)key->len) : NULL;
            if (!v) { Py_DECREF(codes); Py_DECREF(values); goto fail; }
            PyList_SET_ITEM(values, (Py_ssize_t)i, v);
        }
        PyObject *pair = Py_BuildValue("(NN)", codes, values);
        if (!pair) goto fail;
        PyTuple_SET_ITEM(objects, k, pair);
    }
    PyObject *bounds = PyTuple_New(FP_N_INTS);
    if (!bounds) goto fail;
    for (int k = 0; k < FP_N_INTS; k++) {
        PyObject *pair = c->n ? Py_BuildValue("(LL)", (long long)c->lo[k], (long long)c->hi[k])
                              : Py_BuildValue("(ii)", 0, -1);
        if (!pair) { Py_DECREF(bounds); goto fail; }
        PyTuple_SET_ITEM(bounds, k, pair);
    }
    out = Py_BuildValue("(NnNNNNN)", top, (Py_ssize_t)c->n, ints, bools, floats, objects, bounds);
    return out;
fail:
    Py_XDECREF(top); Py_XDECREF(ints); Py_XDECREF(bools); Py_XDECREF(floats); Py_XDECREF(objects);
    return NULL;
}

static PyObject *parse(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    fp_doc doc;
    fp_cols cols;
    memset(&doc, 0, sizeof doc);
    memset(&cols, 0, sizeof cols);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fp_parse(&doc, view.buf, (size_t)view.len);
    if (rc == 0) rc = fp_columns(&doc, &cols);
    Py_END_ALLOW_THREADS
    PyObject *out;
    if (rc == 0) {
        fp_buf key = {NULL, 0, 0};
        out = build(&doc, &cols, &key);
        fp_buf_free(&key);
        if (!out) {
            /* Too deep, cyclic or too costly to convert (or out of memory): the Python reader
             * decides on this file. */
            PyErr_Clear();
            out = PyUnicode_FromString("value too deep, cyclic or too costly to convert");
        }
    } else if (doc.where) {
        out = PyUnicode_FromFormat("%s (byte %zu)", doc.why ? doc.why : "declined", doc.where);
    } else {
        out = PyUnicode_FromString(doc.why ? doc.why : "declined");
    }
    fp_cols_free(&cols);
    fp_doc_free(&doc);
    PyBuffer_Release(&view);
    return out;
}

/* ---------------------------------------------------------------- decode */

typedef struct {
    const uint8_t *p;
    size_t len, pos;
} reader;

static int take(reader *r, size_t n, const uint8_t **out) {
    if (r->len - r->pos < n) return 0;
    *out = r->p + r->pos;
    r->pos += n;
    return 1;
}

static PyObject *from_key(reader *r, int depth) {
    const uint8_t *at;
    if (depth > FP_MAX_DEPTH || !take(r, 1, &at)) return NULL;
    uint8_t tag = at[0];
    if (tag == 'N') Py_RETURN_NONE;
    if (tag == 'T') Py_RETURN_TRUE;
    if (tag == 'F') Py_RETURN_FALSE;
    if (tag == 'i' || tag == 'f') {
        if (!take(r, 8, &at)) return NULL;
        uint64_t bits = 0;
        for (int i = 7; i >= 0; i--) bits = (bits << 8) | at[i];
        if (tag == 'i') return PyLong_FromLongLong((long long)(int64_t)bits);
        double f;
        memcpy(&f, &bits, sizeof f);
        return PyFloat_FromDouble(f);
    }
    if (!take(r, 4, &at)) return NULL;
    uint32_t n = (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 | (uint32_t)at[3] << 24;
    if (tag == 's') {
        if (!take(r, n, &at)) return NULL;
        return PyUnicode_DecodeUTF8((const char *)at, (Py_ssize_t)n, "strict");
    }
    if (tag != 'l' && tag != 't' && tag != 'd') return NULL;
    if (n > r->len - r->pos) return NULL;  /* every item takes a byte at least */
    if (tag == 'd') {
        if (n % 2) return NULL;
        PyObject *out = PyDict_New();
        if (!out) return NULL;
        for (uint32_t i = 0; i < n; i += 2) {
            PyObject *k = from_key(r, depth + 1);
            PyObject *v = k ? from_key(r, depth + 1) : NULL;
            if (!v || PyDict_SetItem(out, k, v) < 0) {
                Py_XDECREF(k); Py_XDECREF(v); Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(k); Py_DECREF(v);
        }
        return out;
    }
    PyObject *out = tag == 'l' ? PyList_New(n) : PyTuple_New(n);
    if (!out) return NULL;
    for (uint32_t i = 0; i < n; i++) {
        PyObject *item = from_key(r, depth + 1);
        if (!item) { Py_DECREF(out); return NULL; }
        if (tag == 'l') PyList_SET_ITEM(out, i, item);
        else PyTuple_SET_ITEM(out, i, item);
    }
    return out;
}

static PyObject *decode(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    reader r = {view.buf, (size_t)view.len, 0};
    PyObject *out = from_key(&r, 0);
    if (out && r.pos != r.len) Py_CLEAR(out);
    PyBuffer_Release(&view);
    if (!out) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "not the canonical bytes of a plain value");
    }
    return out;
}

static PyObject *field_names(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    PyObject *out = PyTuple_New(FP_N_FIELDS);
    if (!out) return NULL;
    for (int i = 0; i < FP_N_FIELDS; i++) {
        PyObject *s = PyUnicode_FromString(fp_field_names[i]);
        if (!s) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, i, s);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_O, "parse(data) -> columns tuple, or a str saying why it declined"},
    {"field_names", field_names, METH_NOARGS, "entry keys in column order"},
    {"decode", decode, METH_O, "decode(key) -> the plain value of a distinct value's canonical bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "analyzer.load._fastpickle",
    "Compiled reader of flight-recorder pickles (plain data only; everything else declined).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastpickle(void) { return PyModule_Create(&module); }
