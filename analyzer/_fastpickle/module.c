/* analyzer._fastpickle: the Python face of the compiled reader's core (core.c).
 *
 * parse(data) -> tuple on success, or a str saying why the file was declined:
 *   (top, n, ints, bools, floats, objects)
 *   top     : the top-level dict, "entries" mapped to None (small: version, pg_config...)
 *   n       : number of entries
 *   ints    : tuple of bytearrays of int64, in core.h's column order (None/missing -> default)
 *   bools   : tuple of 2 bytearrays of uint8 (is_p2p, retired)
 *   floats  : bytearray of float64 (duration_ms, NaN when None/missing)
 *   objects : tuple of (codes bytearray of int32, list of distinct values in order of first
 *             use) per object field. Only the distinct values become Python objects.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core.h"

static PyObject *to_py(fp_doc *doc, const fp_node *n, int depth) {
    if (depth > FP_MAX_DEPTH || !fp_spend(doc, 1)) return NULL;
    switch (n->tag) {
    case FP_NONE: Py_RETURN_NONE;
    case FP_TRUE: Py_RETURN_TRUE;
    case FP_FALSE: Py_RETURN_FALSE;
    case FP_INT: return PyLong_FromLongLong(n->u.i);
    case FP_FLOAT: return PyFloat_FromDouble(n->u.f);
    case FP_STR: return PyUnicode_DecodeUTF8(n->u.s, (Py_ssize_t)n->len, "strict");
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

static PyObject *build(fp_doc *doc, fp_cols *c) {
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
            PyObject *v = to_py(doc, c->distinct[k][i], 0);
            if (!v) { Py_DECREF(codes); Py_DECREF(values); goto fail; }
            PyList_SET_ITEM(values, (Py_ssize_t)i, v);
        }
        PyObject *pair = Py_BuildValue("(NN)", codes, values);
        if (!pair) goto fail;
        PyTuple_SET_ITEM(objects, k, pair);
    }
    out = Py_BuildValue("(NnNNNN)", top, (Py_ssize_t)c->n, ints, bools, floats, objects);
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
        out = build(&doc, &cols);
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
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "analyzer._fastpickle",
    "Compiled reader of flight-recorder pickles (plain data only; everything else declined).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastpickle(void) { return PyModule_Create(&module); }
