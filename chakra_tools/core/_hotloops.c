/* The compiled hot loops of core: the `.et` writer's encoder and the validator's common case.
 * Each has a Python twin that is the reference (the tests compare them) and that runs where this
 * file was not built; core/hotloops.py picks one of the two, and etio and validate call it.
 *
 *     encode_frames(nodes: list | tuple, start: int) -> (bytes, next)
 *         (twin: encoder.encode_frames) Node tuples -> length-prefixed protobuf frames. Writing was a
 *         quarter of a conversion: in Python every node costs a few microseconds of bytes
 *         objects joined together. It encodes nodes[start:] until one is "punted" or about
 *         4 MiB are buffered; nodes[next] is the first node not encoded, and next == start
 *         means nodes[start] is Python's to encode. A node is punted when anything in it is
 *         unusual: a value out of its kind's range, a negative id, a kind other than the varint,
 *         string and double scalars, a doc string, a value of an unexpected type, a node that
 *         would encode to nothing. Python then encodes it or raises the error that names it, so
 *         this file never has to word an error of its own.
 *
 *     plain_run(nodes, start, first, count, contract, comm_types) -> int
 *         (twin: none claimed, validate.scan_rank checks each node) how many nodes from nodes[start] on have nothing to report and
 *         change nothing but the count of consecutive ids: ids first+count, first+count+1, ...;
 *         no control dependencies; data dependencies on earlier nodes of the run; not a
 *         communication node; every contract attribute of its contract kind.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define CHUNK_BYTES (4 << 20)
#define PUNT (-1)  /* leave this node to Python; no exception set */
#define FAIL (-2)  /* a Python exception is set (memory) */

typedef struct {
    unsigned char *p;
    Py_ssize_t len, cap;
} Buf;

static int buf_grow(Buf *b, Py_ssize_t extra)
{
    Py_ssize_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < need)
        cap *= 2;
    unsigned char *p = PyMem_Realloc(b->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return FAIL;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int varint_len(uint64_t v)
{
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* The caller has reserved room (at most 10 bytes per varint). */
static inline void put_varint(Buf *b, uint64_t v)
{
    while (v >= 0x80) {
        b->p[b->len++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    b->p[b->len++] = (unsigned char)v;
}

static inline void put_raw(Buf *b, const void *s, Py_ssize_t n)
{
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

/* A non-negative int that fits 64 bits, else PUNT. Accepts int subclasses (IntEnum, bool): they
 * encode as their value, as protobuf does. */
static int as_u64(PyObject *o, uint64_t *out)
{
    if (!PyLong_Check(o))
        return PUNT;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return PUNT;
    }
    if (overflow || v < 0)
        return PUNT;
    *out = (uint64_t)v;
    return 0;
}

static int utf8(PyObject *s, const char **p, Py_ssize_t *n)
{
    if (!PyUnicode_Check(s))
        return PUNT;
    *p = PyUnicode_AsUTF8AndSize(s, n);
    if (*p == NULL) { /* lone surrogates: Python's encoder raises the UnicodeError */
        PyErr_Clear();
        return PUNT;
    }
    return 0;
}

/* field tag + length + bytes, as a length-delimited field */
static int put_len_field(Buf *b, const unsigned char *tag, int tag_len, const char *s, Py_ssize_t n)
{
    if (buf_grow(b, tag_len + 10 + n))
        return FAIL;
    put_raw(b, tag, tag_len);
    put_varint(b, (uint64_t)n);
    put_raw(b, s, n);
    return 0;
}

/* A packed repeated uint64 field of ids (a tuple or list of non-negative ints). */
static int put_ids(Buf *b, unsigned char tag, PyObject *seq)
{
    if (!PyTuple_Check(seq) && !PyList_Check(seq))
        return PUNT;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0)
        return 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    uint64_t body = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* first pass: check and size */
        uint64_t v;
        if (as_u64(items[i], &v))
            return PUNT;
        body += varint_len(v);
    }
    if (buf_grow(b, 1 + 10 + (Py_ssize_t)body))
        return FAIL;
    b->p[b->len++] = tag;
    put_varint(b, body);
    for (Py_ssize_t i = 0; i < n; i++)
        put_varint(b, (uint64_t)PyLong_AsUnsignedLongLong(items[i]));
    return 0;
}

/* IOInfo(values, shapes, types) as field 8 or 9; each non-empty string one sub-field. */
static int put_io(Buf *b, unsigned char tag, PyObject *io)
{
    if (!PyTuple_Check(io) || PyTuple_GET_SIZE(io) != 3)
        return PUNT;
    const char *s[3];
    Py_ssize_t n[3];
    uint64_t body = 0;
    for (int i = 0; i < 3; i++) {
        if (utf8(PyTuple_GET_ITEM(io, i), &s[i], &n[i]))
            return PUNT;
        if (n[i])
            body += 1 + varint_len((uint64_t)n[i]) + (uint64_t)n[i];
    }
    if (buf_grow(b, 1 + 10 + (Py_ssize_t)body))
        return FAIL;
    b->p[b->len++] = tag;
    put_varint(b, body);
    for (int i = 0; i < 3; i++) {
        if (n[i]) {
            b->p[b->len++] = (unsigned char)(0x0a + 8 * i);
            put_varint(b, (uint64_t)n[i]);
            put_raw(b, s[i], n[i]);
        }
    }
    return 0;
}

/* The attribute kinds encoded here: one varint (with the range protobuf enforces), a string, a
 * double. Tags as in AttributeProto's oneof. */
enum { K_VARINT, K_STRING, K_DOUBLE };
typedef struct {
    const char *kind;
    int cls;
    unsigned char tag[2];
    int tag_len;
    long long lo;          /* varint kinds: inclusive */
    unsigned long long hi; /* varint kinds: exclusive, as unsigned */
} Kind;

static const Kind KINDS[] = {
    {"bool_val", K_VARINT, {0xd8, 0x01}, 2, 0, 2},
    {"int64_val", K_VARINT, {0x48}, 1, INT64_MIN, (unsigned long long)INT64_MAX + 1},
    {"uint64_val", K_VARINT, {0x68}, 1, 0, 0 /* whole range: see value_varint */},
    {"int32_val", K_VARINT, {0x38}, 1, INT32_MIN, (unsigned long long)INT32_MAX + 1},
    {"uint32_val", K_VARINT, {0x58}, 1, 0, (unsigned long long)UINT32_MAX + 1},
    {"string_val", K_STRING, {0xea, 0x01}, 2, 0, 0},
    {"double_val", K_DOUBLE, {0x19}, 1, 0, 0},
};
#define N_KINDS (sizeof(KINDS) / sizeof(KINDS[0]))

static const Kind *find_kind(PyObject *kind)
{
    const char *s;
    Py_ssize_t n;
    if (utf8(kind, &s, &n))
        return NULL;
    for (size_t i = 0; i < N_KINDS; i++)
        if (strcmp(s, KINDS[i].kind) == 0)
            return &KINDS[i];
    return NULL;
}

/* The varint of an int value within the kind's range (negatives as 64-bit two's complement). */
static int value_varint(const Kind *k, PyObject *v, uint64_t *out)
{
    if (!PyLong_Check(v))
        return PUNT;
    if (k->hi == 0) { /* uint64: any of [0, 2**64) */
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return PUNT;
        }
        *out = u;
        return 0;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return PUNT;
    }
    if (overflow || x < k->lo || (x >= 0 && (unsigned long long)x >= k->hi))
        return PUNT;
    *out = (uint64_t)x;
    return 0;
}

/* One attribute as field 10 of Node: AttributeProto{name, value}. */
static int put_attr(Buf *b, PyObject *name, PyObject *attr)
{
    if (!PyTuple_Check(attr) || PyTuple_GET_SIZE(attr) != 3)
        return PUNT;
    PyObject *doc = PyTuple_GET_ITEM(attr, 2);
    if (!PyUnicode_Check(doc) || PyUnicode_GET_LENGTH(doc) != 0)
        return PUNT;
    const Kind *k = find_kind(PyTuple_GET_ITEM(attr, 0));
    if (k == NULL)
        return PUNT;
    const char *ns;
    Py_ssize_t nn;
    if (utf8(name, &ns, &nn) || nn == 0)
        return PUNT;
    PyObject *v = PyTuple_GET_ITEM(attr, 1);
    uint64_t u = 0;
    const char *vs = NULL;
    Py_ssize_t vn = 0;
    double d = 0;
    uint64_t value_len;
    if (k->cls == K_VARINT) {
        if (value_varint(k, v, &u))
            return PUNT;
        value_len = k->tag_len + varint_len(u);
    } else if (k->cls == K_STRING) {
        if (utf8(v, &vs, &vn))
            return PUNT;
        value_len = k->tag_len + varint_len((uint64_t)vn) + (uint64_t)vn;
    } else {
        if (!PyFloat_Check(v))
            return PUNT;
        d = PyFloat_AS_DOUBLE(v);
        value_len = k->tag_len + 8;
    }
    uint64_t body = 1 + varint_len((uint64_t)nn) + (uint64_t)nn + value_len;
    if (buf_grow(b, 1 + 10 + (Py_ssize_t)body))
        return FAIL;
    b->p[b->len++] = 0x52;
    put_varint(b, body);
    b->p[b->len++] = 0x0a;
    put_varint(b, (uint64_t)nn);
    put_raw(b, ns, nn);
    put_raw(b, k->tag, k->tag_len);
    if (k->cls == K_VARINT) {
        put_varint(b, u);
    } else if (k->cls == K_STRING) {
        put_varint(b, (uint64_t)vn);
        put_raw(b, vs, vn);
    } else {
        uint64_t bits;
        memcpy(&bits, &d, 8);
        for (int i = 0; i < 8; i++) /* little-endian, whatever the host */
            b->p[b->len++] = (unsigned char)(bits >> (8 * i));
    }
    return 0;
}

/* Attributes in name order (as sorted() orders str: by code point, which PyUnicode_Compare is). */
static int put_attrs(Buf *b, PyObject *attrs)
{
    if (!PyDict_Check(attrs))
        return PyObject_Length(attrs) == 0 ? 0 : (PyErr_Clear(), PUNT);
    Py_ssize_t n = PyDict_GET_SIZE(attrs);
    if (n == 0)
        return 0;
    PyObject *small_keys[16], *small_vals[16];
    PyObject **keys = small_keys, **vals = small_vals;
    if (n > 16) {
        keys = PyMem_Malloc(2 * n * sizeof(PyObject *));
        if (keys == NULL) {
            PyErr_NoMemory();
            return FAIL;
        }
        vals = keys + n;
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *val;
    int rc = 0;
    while (PyDict_Next(attrs, &pos, &key, &val)) {
        if (!PyUnicode_Check(key)) {
            rc = PUNT;
            goto done;
        }
        Py_ssize_t j = i++; /* insertion sort: attribute lists are short */
        while (j > 0 && PyUnicode_Compare(keys[j - 1], key) > 0) {
            keys[j] = keys[j - 1];
            vals[j] = vals[j - 1];
            j--;
        }
        keys[j] = key;
        vals[j] = val;
    }
    for (i = 0; i < n && rc == 0; i++)
        rc = put_attr(b, keys[i], vals[i]);
done:
    if (keys != small_keys)
        PyMem_Free(keys);
    return rc;
}

/* One Node tuple: (id, name, type, data_deps, ctrl_deps, start, duration, attrs, inputs, outputs),
 * fields in number order, defaults omitted. */
static int encode_node(Buf *b, PyObject *node)
{
    if (!PyTuple_Check(node) || PyTuple_GET_SIZE(node) != 10)
        return PUNT;
    PyObject **f = &PyTuple_GET_ITEM(node, 0);
    uint64_t id, type, start, duration;
    if (as_u64(f[0], &id) || as_u64(f[2], &type) || as_u64(f[5], &start) ||
        as_u64(f[6], &duration))
        return PUNT;
    const char *name;
    Py_ssize_t name_len;
    if (utf8(f[1], &name, &name_len))
        return PUNT;
    static const unsigned char name_tag = 0x12;
    int rc;
    if (buf_grow(b, 33))
        return FAIL;
    if (id) {
        b->p[b->len++] = 0x08;
        put_varint(b, id);
    }
    if (name_len && (rc = put_len_field(b, &name_tag, 1, name, name_len)))
        return rc;
    if (buf_grow(b, 11))
        return FAIL;
    if (type) {
        b->p[b->len++] = 0x18;
        put_varint(b, type);
    }
    if ((rc = put_ids(b, 0x22, f[4])) || (rc = put_ids(b, 0x2a, f[3])))
        return rc;
    if (buf_grow(b, 22))
        return FAIL;
    if (start) {
        b->p[b->len++] = 0x30;
        put_varint(b, start);
    }
    if (duration) {
        b->p[b->len++] = 0x38;
        put_varint(b, duration);
    }
    if (f[8] != Py_None && (rc = put_io(b, 0x42, f[8])))
        return rc;
    if (f[9] != Py_None && (rc = put_io(b, 0x4a, f[9])))
        return rc;
    return put_attrs(b, f[7]);
}

static PyObject *encode_frames(PyObject *self, PyObject *args)
{
    PyObject *nodes;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "On:encode_frames", &nodes, &start))
        return NULL;
    if (!PyList_Check(nodes) && !PyTuple_Check(nodes)) {
        PyErr_SetString(PyExc_TypeError, "encode_frames: nodes must be a list or a tuple");
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(nodes);
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_IndexError, "encode_frames: start out of range");
        return NULL;
    }
    Buf out = {0}, node = {0};
    Py_ssize_t i = start;
    PyObject *result = NULL;
    for (; i < n && out.len < CHUNK_BYTES; i++) {
        node.len = 0;
        int rc = encode_node(&node, PySequence_Fast_GET_ITEM(nodes, i));
        if (rc == FAIL)
            goto end;
        if (rc == PUNT || node.len == 0) /* an empty message reads as end of file: Python says so */
            break;
        if (buf_grow(&out, 10 + node.len))
            goto end;
        put_varint(&out, (uint64_t)node.len);
        put_raw(&out, node.p, node.len);
    }
    result = Py_BuildValue("(y#n)", out.p ? (const char *)out.p : "", out.len, i);
end:
    PyMem_Free(out.p);
    PyMem_Free(node.p);
    return result;
}

/* -- plain_run --------------------------------------------------------------------------- */

/* Whether every attribute named in `contract` has the kind it names (validate._kinds_ok). */
static int kinds_ok(PyObject *attrs, PyObject *contract)
{
    if (!PyDict_Check(attrs)) {
        Py_ssize_t n = PyObject_Length(attrs);
        if (n < 0)
            PyErr_Clear();
        return n == 0;
    }
    Py_ssize_t pos = 0;
    PyObject *name, *attr;
    while (PyDict_Next(attrs, &pos, &name, &attr)) {
        PyObject *want = PyDict_GetItemWithError(contract, name);
        if (want == NULL) {
            if (PyErr_Occurred()) { /* an unhashable key: Python looks at it */
                PyErr_Clear();
                return 0;
            }
            continue;
        }
        if (!PyTuple_Check(attr) || PyTuple_GET_SIZE(attr) < 1)
            return 0;
        PyObject *kind = PyTuple_GET_ITEM(attr, 0);
        if (kind != want && !(PyUnicode_Check(kind) && PyUnicode_Compare(kind, want) == 0)) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

static PyObject *plain_run(PyObject *self, PyObject *args)
{
    PyObject *nodes, *contract, *comm_types;
    Py_ssize_t start;
    long long first, count;
    if (!PyArg_ParseTuple(args, "OnLLO!O:plain_run", &nodes, &start, &first, &count, &PyDict_Type,
                          &contract, &comm_types))
        return NULL;
    if (!PyList_Check(nodes) && !PyTuple_Check(nodes)) {
        PyErr_SetString(PyExc_TypeError, "plain_run: nodes must be a list or a tuple");
        return NULL;
    }
    if (!PyAnySet_Check(comm_types)) {
        PyErr_SetString(PyExc_TypeError, "plain_run: comm_types must be a set");
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(nodes), i = start < 0 ? n : start;
    for (; i < n; i++) {
        PyObject *node = PySequence_Fast_GET_ITEM(nodes, i);
        if (!PyTuple_Check(node) || PyTuple_GET_SIZE(node) != 10)
            break;
        PyObject **f = &PyTuple_GET_ITEM(node, 0);
        int overflow;
        long long id = PyLong_Check(f[0]) ? PyLong_AsLongLongAndOverflow(f[0], &overflow) : -1;
        if (id == -1 || overflow || id != first + count + (i - start)) {
            PyErr_Clear();
            break;
        }
        if (!PyTuple_Check(f[4]) || PyTuple_GET_SIZE(f[4]) != 0 || !PyTuple_Check(f[3]))
            break;
        Py_ssize_t nd = PyTuple_GET_SIZE(f[3]), k = 0;
        for (; k < nd; k++) {
            PyObject *d = PyTuple_GET_ITEM(f[3], k);
            long long v = PyLong_Check(d) ? PyLong_AsLongLongAndOverflow(d, &overflow) : -1;
            if ((v == -1 && PyErr_Occurred()) || overflow || v < first || v >= id)
                break;
        }
        PyErr_Clear();
        if (k < nd)
            break;
        int comm = PySet_Contains(comm_types, f[2]);
        if (comm != 0) { /* a communication node, or an unhashable type: Python's */
            PyErr_Clear();
            break;
        }
        if (!kinds_ok(f[7], contract))
            break;
    }
    return PyLong_FromSsize_t(i - (start < 0 ? n : start));
}

static PyMethodDef methods[] = {
    {"encode_frames", encode_frames, METH_VARARGS,
     "encode_frames(nodes, start) -> (bytes, next): length-prefixed Node messages for\n"
     "nodes[start:next]; stops early at a node Python must encode (next == start then) or after\n"
     "about 4 MiB."},
    {"plain_run", plain_run, METH_VARARGS,
     "plain_run(nodes, start, first, count, contract, comm_types) -> how many nodes from start on\n"
     "the validator has nothing to say about (consecutive ids from first + count)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hotloops",
    "Compiled hot loops of core: the .et encoder and the validator's common case (see etio.py and "
    "validate.py, the reference).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__hotloops(void)
{
    return PyModule_Create(&module);
}
