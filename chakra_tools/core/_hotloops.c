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
 *
 *     decode_node(msg, use_data, use_ctrl, info_type, max_type, comm_coll) -> (id, deps, info) | None
 *     Window(...): a feeder's window of loaded nodes as C records
 *     load_node(window, msg[, offset]) -> id | None
 *     load_frames(window, buf, pos, base, budget) -> (pos, loaded)
 *     finish_node(window, nid) -> freed | None
 *         (twins: none claimed, the feeder's reference decode, load and finish) see their sections below.
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

/* ---- decode_node: one Node message -> what the feeder keeps of it (feed/feeder.py) -----------
 *
 *     decode_node(msg, use_data, use_ctrl, info_type, max_type, comm_coll) -> (id, deps, info) | None
 *         (twin: hotloops._decode_node_twin claims no node; the feeder's reference path,
 *         pb.Node.FromString + feed/info.node_info, decodes every one). Reads the wire format
 *         directly, without building protobuf objects: the id, the dependencies the feeder resolves
 *         (data then control, each id once, in order) and `info_type(...)` (feed/info.NodeInfo,
 *         its 18 fields as node_info fills them). Returns None (punts) where the reference might
 *         differ or must word an error: a malformed message, a string that is not UTF-8, a field
 *         Node does not have or with another wire type (the legacy check sees those), a type out
 *         of 0..max_type, a group, over 64 dependencies of a kind, a list value given twice.
 */

#define MAX_DEPS 64
#define N_SLOTS 10

typedef const unsigned char *Ptr;

static inline int rd_varint(Ptr *p, Ptr end, uint64_t *v)
{
    uint64_t r = 0;
    Ptr q = *p;
    for (int s = 0; q < end; s += 7) {
        unsigned b = *q++;
        if (s == 63 && b > 1)
            return PUNT;
        r |= (uint64_t)(b & 0x7F) << s;
        if (b < 0x80) {
            *v = r;
            *p = q;
            return 0;
        }
        if (s == 63)
            return PUNT;
    }
    return PUNT;
}

static inline uint64_t rd_le(Ptr p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The value of a field of wire type `wt` at *p: a varint or fixed number in *v, or a
 * length-delimited span in *s and *n; moves *p past it. Groups (3, 4) and bad wire types punt. */
static inline int rd_value(Ptr *p, Ptr end, int wt, uint64_t *v, Ptr *s, Py_ssize_t *n)
{
    switch (wt) {
    case 0:
        return rd_varint(p, end, v);
    case 1:
    case 5: {
        int w = wt == 1 ? 8 : 4;
        if (end - *p < w)
            return PUNT;
        *v = rd_le(*p, w);
        *p += w;
        return 0;
    }
    case 2: {
        uint64_t len;
        if (rd_varint(p, end, &len) || len > (uint64_t)(end - *p))
            return PUNT;
        *s = *p;
        *n = (Py_ssize_t)len;
        *p += len;
        return 0;
    }
    default:
        return PUNT;
    }
}

/* A proto3 string: valid UTF-8 (the protobuf parser refuses anything else). */
static int utf8_ok(Ptr s, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] >= 0x80) {
            PyObject *u = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
            if (u == NULL) {
                PyErr_Clear();
                return 0;
            }
            Py_DECREF(u);
            return 1;
        }
    }
    return 1;
}

/* The wire type of a scalar kind by its AttributeProto field number (3, 5, ..., 31). */
static int scalar_wt(int field)
{
    switch (field) {
    case 3: case 21: case 25: return 1;       /* double, fixed64, sfixed64 */
    case 5: case 19: case 23: return 5;       /* float, fixed32, sfixed32 */
    case 29: case 31: return 2;               /* string, bytes */
    default: return 0;                        /* the varint kinds and bool */
    }
}

/* One field of a message: its number, its wire type and its value (rd_value's). */
typedef struct {
    int f, w;
    uint64_t v;
    Ptr s;
    Py_ssize_t n;
} Field;

/* The field at *p (moving past it); PUNT for a malformed one or field number 0. */
static inline int next_field(Ptr *p, Ptr end, Field *fd)
{
    uint64_t key;
    fd->v = 0;
    fd->s = NULL;
    fd->n = 0;
    if (rd_varint(p, end, &key) || key >> 3 == 0 || key >> 3 > INT32_MAX)
        return PUNT;
    fd->f = (int)(key >> 3);
    fd->w = (int)(key & 7);
    return rd_value(p, end, fd->w, &fd->v, &fd->s, &fd->n);
}

/* A message whose field `field` (0: any of 1..3, IOInfo's) is repeated of wire type `wt`: well
 * formed, packed or not; with `strings`, each value valid UTF-8; other fields skipped. */
static int check_repeated(Ptr p, Ptr end, int field, int wt, int strings)
{
    Field fd;
    while (p < end) {
        if (next_field(&p, end, &fd))
            return PUNT;
        if (field == 0 ? fd.f > 3 : fd.f != field)
            continue;
        if (wt == 2) {
            if (fd.w != 2 || (strings && !utf8_ok(fd.s, fd.n)))
                return PUNT;
        } else if (fd.w == 2) { /* packed */
            if (wt == 0) {
                Ptr q = fd.s, qe = fd.s + fd.n;
                uint64_t v;
                while (q < qe)
                    if (rd_varint(&q, qe, &v))
                        return PUNT;
            } else if (fd.n % (wt == 1 ? 8 : 4))
                return PUNT;
        } else if (fd.w != wt)
            return PUNT;
    }
    return 0;
}

/* A list kind's message (AttributeProto field `list_field`): its values as its scalar's. */
static int check_list(Ptr s, Py_ssize_t n, int list_field)
{
    int scalar = list_field - 1;
    return check_repeated(s, s + n, 1, scalar_wt(scalar), scalar == 29 /* string_list */);
}

typedef struct {
    Ptr name;
    Py_ssize_t name_len;
    int kind;        /* the value's field number, 0 if none */
    uint64_t v;      /* a scalar value (raw: varint or little-endian bits) */
    Ptr s;           /* a length-delimited value */
    Py_ssize_t n;
} Attr;

static int read_attr(Ptr p, Ptr end, Attr *a)
{
    int kinds = 0, list_seen = 0;
    memset(a, 0, sizeof *a);
    a->name = (Ptr) "";
    Field fd;
    while (p < end) {
        if (next_field(&p, end, &fd))
            return PUNT;
        if (fd.f == 1 || fd.f == 2) { /* name, doc_string */
            if (fd.w != 2 || !utf8_ok(fd.s, fd.n))
                return PUNT;
            if (fd.f == 1) {
                a->name = fd.s;
                a->name_len = fd.n;
            }
        } else if (fd.f >= 3 && fd.f <= 32) {
            int list = fd.f % 2 == 0;
            if (fd.w != (list ? 2 : scalar_wt(fd.f)))
                return PUNT;
            if (list) {
                if (check_list(fd.s, fd.n, fd.f))
                    return PUNT;
                list_seen = 1;
            } else if (fd.f == 29 && !utf8_ok(fd.s, fd.n))
                return PUNT;
            if (++kinds > 1 && list_seen) /* a list merged or replaced: the reference says */
                return PUNT;
            a->kind = fd.f;
            a->v = fd.v;
            a->s = fd.s;
            a->n = fd.n;
        }
        /* other fields: unknown to AttributeProto, skipped as protobuf keeps them aside */
    }
    return 0;
}

static inline int name_is(const Attr *a, const char *lit, Py_ssize_t n)
{
    return a->name_len == n && memcmp(a->name, lit, n) == 0;
}

/* The NodeInfo slot of an integer contract attribute (feed/info._INT_SLOT), or -1. */
static int int_slot(const Attr *a)
{
    static const char *names[N_SLOTS] = {"num_ops", "tensor_size", "comm_type", "comm_size", "comm_src",
                                         "comm_dst", "comm_tag", "duration_ns", "tid", "stream"};
    for (int i = 0; i < N_SLOTS; i++)
        if (name_is(a, names[i], (Py_ssize_t)strlen(names[i])))
            return i;
    return -1;
}

/* An integer kind's value as Python reads it, or NULL with nothing set if not an integer kind. */
static PyObject *int_value(int kind, uint64_t v)
{
    switch (kind) {
    case 7:  return PyLong_FromLong((int32_t)(uint32_t)v);                         /* int32 */
    case 9:  return PyLong_FromLongLong((int64_t)v);                               /* int64 */
    case 11: return PyLong_FromUnsignedLong((uint32_t)v);                          /* uint32 */
    case 13: return PyLong_FromUnsignedLongLong(v);                                /* uint64 */
    case 15: { uint32_t u = (uint32_t)v;                                           /* sint32 */
               return PyLong_FromLong((int32_t)((u >> 1) ^ (0u - (u & 1)))); }
    case 17: return PyLong_FromLongLong((int64_t)((v >> 1) ^ (0ull - (v & 1))));   /* sint64 */
    case 19: return PyLong_FromUnsignedLong((uint32_t)v);                          /* fixed32 */
    case 21: return PyLong_FromUnsignedLongLong(v);                                /* fixed64 */
    case 23: return PyLong_FromLong((int32_t)(uint32_t)v);                         /* sfixed32 */
    case 25: return PyLong_FromLongLong((int64_t)v);                               /* sfixed64 */
    default: return NULL;
    }
}

static inline int is_int_kind(int kind)
{
    return kind >= 7 && kind <= 25 && kind % 2 == 1;
}

static int add_ids(Ptr s, Py_ssize_t n, int wt, uint64_t v, uint64_t *ids, int *count)
{
    if (wt == 0) {
        if (*count >= MAX_DEPS)
            return PUNT;
        ids[(*count)++] = v;
        return 0;
    }
    if (wt != 2)
        return PUNT;
    Ptr q = s, end = s + n;
    while (q < end) {
        if (*count >= MAX_DEPS || rd_varint(&q, end, &v))
            return PUNT;
        ids[(*count)++] = v;
    }
    return 0;
}

static int info_type_ok(PyTypeObject *t)
{
    static PyTypeObject *checked = NULL;
    if (t == checked)
        return 1;
    if (!PyType_Check(t) || !PyType_IsSubtype(t, &PyTuple_Type) || t->tp_basicsize != PyTuple_Type.tp_basicsize)
        return 0;
    PyObject *fields = PyObject_GetAttrString((PyObject *)t, "_fields");
    if (fields == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t n = PyObject_Length(fields);
    Py_DECREF(fields);
    if (n != 18) {
        PyErr_Clear();
        return 0;
    }
    checked = t;
    return 1;
}

/* What a feeder's decode needs to know: its `resolve`, NodeInfo and the node types. */
typedef struct {
    int use_data, use_ctrl;
    PyTypeObject *info_type;
    long max_type, comm_coll;
} Spec;

/* Everything of one Node message that the feeder keeps, as numbers and spans of the message (or
 * of a window's arena): what `build_info` makes a NodeInfo of, and the resolved dependencies. */
typedef struct {
    uint64_t id, start, dur;
    int64_t type;
    int is_cpu, has_inv, n_deps;
    Ptr name, pg; /* pg NULL: no pg_name string */
    Py_ssize_t name_len, pg_len, n_inv;
    int slot_kind[N_SLOTS];
    uint64_t slot_v[N_SLOTS];
    unsigned char inv[256];
    uint64_t deps[2 * MAX_DEPS];
} Parsed;

/* One Node message read into *d: 0, or PUNT (where the reference might differ or must word an
 * error). Makes no Python object. */
static int parse(Ptr p, Py_ssize_t size, const Spec *sp, Parsed *d)
{
    Ptr end = p + size;
    uint64_t data[MAX_DEPS], ctrl[MAX_DEPS];
    int n_data = 0, n_ctrl = 0;
    Ptr involved = NULL;
    Py_ssize_t involved_len = 0;
    d->id = d->start = d->dur = 0;
    d->type = 0;
    d->is_cpu = 0;
    d->name = (Ptr) "";
    d->name_len = 0;
    d->pg = NULL;
    d->pg_len = 0;
    memset(d->slot_kind, 0, sizeof d->slot_kind);

    Field fd;
    while (p < end) {
        if (next_field(&p, end, &fd))
            return PUNT;
        int f = fd.f, w = fd.w;
        uint64_t v = fd.v;
        Ptr s = fd.s;
        Py_ssize_t n = fd.n;
        switch (f) {
        case 1: case 3: case 6: case 7:
            if (w != 0)
                return PUNT;
            if (f == 1) d->id = v;
            else if (f == 3) d->type = (int32_t)(uint32_t)v;
            else if (f == 6) d->start = v;
            else d->dur = v;
            break;
        case 2:
            if (w != 2 || !utf8_ok(s, n))
                return PUNT;
            d->name = s;
            d->name_len = n;
            break;
        case 4: case 5:
            if (add_ids(s, n, w, v, f == 5 ? data : ctrl, f == 5 ? &n_data : &n_ctrl))
                return PUNT;
            break;
        case 8: case 9:
            if (w != 2 || check_repeated(s, s + n, 0, 2, 1))
                return PUNT;
            break;
        case 10: {
            Attr a;
            if (w != 2 || read_attr(s, s + n, &a))
                return PUNT;
            int slot;
            if (name_is(&a, "is_cpu_op", 9)) {
                if (a.kind == 27)
                    d->is_cpu = a.v != 0;
            } else if ((slot = int_slot(&a)) >= 0) {
                if (is_int_kind(a.kind)) {
                    d->slot_kind[slot] = a.kind;
                    d->slot_v[slot] = a.v;
                }
            } else if (name_is(&a, "pg_name", 7)) {
                if (a.kind == 29) {
                    d->pg = a.s;
                    d->pg_len = a.n;
                }
            } else if (name_is(&a, "involved_dim", 12) && a.kind == 28) {
                involved = a.s;
                involved_len = a.n;
            }
            break;
        }
        default: /* a field today's Node lacks: the legacy check and the reference decide */
            return PUNT;
        }
    }
    if (d->type < 0 || d->type > sp->max_type)
        return PUNT;

    /* deps: data then control (as the feeder resolves them), each id once, first place kept */
    int n_deps = 0;
    for (int k = 0; k < 2; k++) {
        const uint64_t *ids = k == 0 ? data : ctrl;
        int count = k == 0 ? (sp->use_data ? n_data : 0) : (sp->use_ctrl ? n_ctrl : 0);
        for (int i = 0; i < count; i++) {
            int dup = 0;
            for (int j = 0; j < n_deps && !dup; j++)
                dup = d->deps[j] == ids[i];
            if (!dup)
                d->deps[n_deps++] = ids[i];
        }
    }
    d->n_deps = n_deps;

    /* the involved_dim values: a BoolList's field 1, packed or not */
    d->has_inv = involved != NULL;
    d->n_inv = 0;
    if (involved != NULL) {
        Ptr q = involved, qe = involved + involved_len;
        while (q < qe) {
            uint64_t v;
            if (next_field(&q, qe, &fd))
                return PUNT;
            if (fd.f != 1)
                continue;
            if (fd.w == 0) {
                if (d->n_inv >= 256)
                    return PUNT;
                d->inv[d->n_inv++] = fd.v != 0;
            } else { /* packed: check_list saw every other wire type off */
                Ptr r = fd.s, re = fd.s + fd.n;
                while (r < re) {
                    if (d->n_inv >= 256 || rd_varint(&r, re, &v))
                        return PUNT;
                    d->inv[d->n_inv++] = v != 0;
                }
            }
        }
    }
    return 0;
}

/* ---- scan_frames: the validator's common case on the raw frames (core/validate.py) -------------
 *
 *     scan_frames(buf, pos, first, count, contract, pgs, sink, max_comm_type[, colls, kinds])
 *         -> (pos, n, last)
 *         (twin: hotloops._scan_frames_twin claims no frame; the validator decodes every node with
 *         protobuf and checks it). From `pos` on, the frames of `buf` whose nodes the validator has
 *         nothing to say about, one after another: each parses as `parse` reads a node, its id is
 *         first + count + k (consecutive), every dependency is in first .. its id - 1, every
 *         attribute `contract` names (a dict name -> AttributeProto field number) has that kind,
 *         and a communication node has what it needs (validate.P2P_NEEDS), a comm_type of the
 *         enum (0..max_comm_type), no is_cpu_op true, a pg_name that is "", "0" or an ASCII decimal
 *         in `pgs` (a set of names, or a dict keyed by them: the comm groups; None: only "" and "0") and, on a collective, no group_size. Each
 *         communication node appends to `sink` what the cross-rank checks keep of it:
 *         (7, id, name, pg, comm_type, comm_size) or (5|6, id, name, peer, tag, size); given
 *         `colls` (a dict) and `kinds` (the CommType members by value), a collective's
 *         (id, name, kind, comm_size) goes to colls[pg] instead (`comm_record`). Stops at
 *         the first frame that is not such a node or not whole in `buf`; returns the position after
 *         the last frame it took, how many it took and where that last one starts (-1: none; a
 *         reader names the last good node of a broken file by it).
 */

typedef struct {
    Ptr name;
    Py_ssize_t len;
    int kind;
} ContractKind;

#define MAX_CONTRACT 32

static int contract_table(PyObject *contract, ContractKind *t, int *n)
{
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    *n = 0;
    while (PyDict_Next(contract, &pos, &k, &v)) {
        if (*n >= MAX_CONTRACT || !PyBytes_Check(k) || !PyLong_Check(v))
            return PUNT;
        t[*n].name = (Ptr)PyBytes_AS_STRING(k);
        t[*n].len = PyBytes_GET_SIZE(k);
        t[*n].kind = (int)PyLong_AsLong(v);
        (*n)++;
    }
    return 0;
}

/* What a plain node's attributes say beyond `parse`: every contract kind kept, and whether it has
 * group_size and is_cpu_op of any kind; PUNT where the validator would report something. */
static int attrs_plain(Ptr p, Ptr end, const ContractKind *t, int nt, int *has_group_size)
{
    Field fd;
    *has_group_size = 0;
    while (p < end) {
        if (next_field(&p, end, &fd))
            return PUNT;
        if (fd.f != 10)
            continue;
        Attr a;
        if (read_attr(fd.s, fd.s + fd.n, &a))
            return PUNT;
        if (name_is(&a, "group_size", 10))
            *has_group_size = 1;
        for (int i = 0; i < nt; i++)
            if (a.name_len == t[i].len && memcmp(a.name, t[i].name, a.name_len) == 0) {
                if (a.kind != t[i].kind)
                    return PUNT;
                break;
            }
    }
    return 0;
}

static int pg_plain(const Parsed *d, PyObject *pgs, PyObject **pg)
{
    if (d->pg == NULL || d->pg_len == 0 || (d->pg_len == 1 && d->pg[0] == '0')) {
        *pg = PyUnicode_FromStringAndSize((const char *)d->pg, d->pg == NULL ? 0 : d->pg_len);
        return *pg == NULL ? -2 : 0;
    }
    if (pgs == Py_None)
        return PUNT;
    for (Py_ssize_t i = 0; i < d->pg_len; i++)
        if (d->pg[i] < '0' || d->pg[i] > '9')
            return PUNT;
    *pg = PyUnicode_FromStringAndSize((const char *)d->pg, d->pg_len);
    if (*pg == NULL)
        return -2;
    int in = PyAnySet_Check(pgs) ? PySet_Contains(pgs, *pg) : PyDict_Contains(pgs, *pg);
    if (in == 1)
        return 0;
    Py_CLEAR(*pg);
    if (in < 0)
        return -2;
    return PUNT;
}

/* The record of a plain communication node, or PUNT / -2 (an exception set): a collective's
 * (id, name, kinds[comm_type], size) appended straight to colls[pg] (a dict of lists, a list made
 * where the pg has none) where `colls` is a dict, else (7, id, name, pg, comm_type, size) to
 * `sink`; a send's or receive's (5|6, id, name, peer, tag, size) to `sink`. */
static int comm_record(const Parsed *d, PyObject *pgs, long max_comm_type, int has_group_size, PyObject *sink,
                       PyObject *colls, PyObject *kinds)
{
    /* slots: comm_type 2, comm_size 3, comm_src 4, comm_dst 5, comm_tag 6 */
    int coll = d->type == 7, send = d->type == 5;
    if (d->is_cpu || !d->slot_kind[3])
        return PUNT;
    PyObject *pg = NULL, *rec = NULL;
    int got = pg_plain(d, pgs, &pg);
    if (got)
        return got;
    PyObject *name = PyUnicode_DecodeUTF8((const char *)d->name, d->name_len, "strict");
    if (name == NULL) {
        Py_DECREF(pg);
        return -2;
    }
    PyObject *size = int_value(d->slot_kind[3], d->slot_v[3]);
    if (coll) {
        PyObject *ct = d->slot_kind[2] ? int_value(d->slot_kind[2], d->slot_v[2]) : NULL;
        long v = ct == NULL ? -1 : PyLong_AsLong(ct);
        if (ct == NULL || has_group_size || v < 0 || v > max_comm_type) {
            PyErr_Clear();
            Py_XDECREF(ct);
            Py_XDECREF(size);
            Py_DECREF(name);
            Py_DECREF(pg);
            return PUNT;
        }
        if (colls != Py_None) {
            if (size == NULL || v >= PyTuple_GET_SIZE(kinds)) {
                Py_DECREF(ct);
                Py_XDECREF(size);
                Py_DECREF(name);
                Py_DECREF(pg);
                return size == NULL ? -2 : PUNT;
            }
            Py_DECREF(ct);
            PyObject *fresh = PyList_New(0);
            PyObject *list = fresh == NULL ? NULL : PyDict_SetDefault(colls, pg, fresh);
            Py_XDECREF(fresh);
            Py_DECREF(pg);
            if (list == NULL) {
                Py_DECREF(size);
                Py_DECREF(name);
                return -2;
            }
            rec = Py_BuildValue("(KNON)", (unsigned long long)d->id, name, PyTuple_GET_ITEM(kinds, v), size);
            if (rec == NULL)
                return -2;
            int bad = PyList_Append(list, rec);
            Py_DECREF(rec);
            return bad ? -2 : 0;
        }
        rec = Py_BuildValue("(iKNNNN)", 7, (unsigned long long)d->id, name, pg, ct, size);
    } else {
        int peer = send ? 5 : 4;
        if (!d->slot_kind[peer] || !d->slot_kind[6]) {
            Py_XDECREF(size);
            Py_DECREF(name);
            Py_DECREF(pg);
            return PUNT;
        }
        Py_DECREF(pg);
        rec = Py_BuildValue("(iKNNNN)", (int)d->type, (unsigned long long)d->id, name,
                            int_value(d->slot_kind[peer], d->slot_v[peer]),
                            int_value(d->slot_kind[6], d->slot_v[6]), size);
    }
    if (rec == NULL)
        return -2;
    int bad = PyList_Append(sink, rec);
    Py_DECREF(rec);
    return bad ? -2 : 0;
}

/* node_parses(msg) -> bool: whether a Node message reads as today's schema (`parse`): then it has
 * no legacy layout (legacy.is_legacy_node wants field 11, or a string in field 6 or 7), and a
 * reader need not look for one. False says nothing: the reference decides. */
static PyObject *node_parses(PyObject *self, PyObject *msg)
{
    if (!PyBytes_Check(msg))
        Py_RETURN_FALSE;
    Spec sp = {1, 1, NULL, 7, 7};
    Parsed d;
    return PyBool_FromLong(!parse((Ptr)PyBytes_AS_STRING(msg), PyBytes_GET_SIZE(msg), &sp, &d));
}

static PyObject *scan_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *colls = nargs == 10 ? args[8] : Py_None, *kinds = nargs == 10 ? args[9] : Py_None;
    if ((nargs != 8 && nargs != 10) || !PyBytes_Check(args[0]) || !PyDict_Check(args[4]) || !PyList_Check(args[6])
        || (args[5] != Py_None && !PyAnySet_Check(args[5]) && !PyDict_Check(args[5]))
        || (colls != Py_None && (!PyDict_Check(colls) || !PyTuple_Check(kinds)))) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_frames(buf, pos, first, count, contract, pgs, sink, max_comm_type[, colls, kinds])");
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]), pos = PyLong_AsSsize_t(args[1]);
    unsigned long long first = PyLong_AsUnsignedLongLong(args[2]), count = PyLong_AsUnsignedLongLong(args[3]);
    long max_comm_type = PyLong_AsLong(args[7]);
    if (PyErr_Occurred())
        return NULL;
    ContractKind table[MAX_CONTRACT];
    int nt;
    Ptr buf = (Ptr)PyBytes_AS_STRING(args[0]);
    Spec sp = {1, 1, NULL, 7, 7};
    long long taken = 0;
    Py_ssize_t last = -1;
    if (pos < 0 || pos > size || contract_table(args[4], table, &nt) || first >> 62 || count >> 62)
        return Py_BuildValue("(nLn)", pos < 0 ? 0 : pos, taken, last);
    Parsed d;
    while (pos < size) {
        Ptr p = buf + pos, end = buf + size;
        uint64_t len;
        if (rd_varint(&p, end, &len) || len == 0 || len > (uint64_t)(end - p))
            break;
        if (parse(p, (Py_ssize_t)len, &sp, &d))
            break;
        uint64_t id = first + count + (uint64_t)taken;
        if (d.id != id)
            break;
        int k = 0;
        for (; k < d.n_deps; k++)
            if (d.deps[k] < first || d.deps[k] >= id)
                break;
        if (k < d.n_deps)
            break;
        int has_group_size;
        if (attrs_plain(p, p + len, table, nt, &has_group_size))
            break;
        if (d.type >= 5 && d.type <= 7) {
            int got = comm_record(&d, args[5], max_comm_type, has_group_size, args[6], colls, kinds);
            if (got == -2)
                return NULL;
            if (got)
                break;
        }
        last = pos;
        pos = (p + len) - buf;
        taken++;
    }
    return Py_BuildValue("(nLn)", pos, taken, last);
}

/* ---- pattern_of: shape_of's refs as the places of their first appearances (core/shapes.py) -----
 *
 *     pattern_of(refs) -> (pattern, groups, ranks)
 *         (twin: hotloops._pattern_of_twin). Each ref (a str: a group; else a rank) as 2 x the
 *         index of its first appearance among its kind, + 1 for a rank; the distinct groups and
 *         ranks in order of first appearance.
 */
static PyObject *pattern_of(PyObject *self, PyObject *refs)
{
    PyObject *fast = PySequence_Fast(refs, "pattern_of(refs): a sequence");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *seen[2] = {PyDict_New(), PyDict_New()}, *order[2] = {PyList_New(0), PyList_New(0)};
    PyObject *pattern = PyTuple_New(n), *out = NULL;
    if (!seen[0] || !seen[1] || !order[0] || !order[1] || !pattern)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ref = PySequence_Fast_GET_ITEM(fast, i);
        int kind = !PyUnicode_CheckExact(ref); /* 0: a group, 1: a rank */
        PyObject *at = PyDict_GetItemWithError(seen[kind], ref); /* borrowed */
        Py_ssize_t index;
        if (at == NULL) {
            if (PyErr_Occurred())
                goto done;
            index = PyList_GET_SIZE(order[kind]);
            PyObject *idx = PyLong_FromSsize_t(index);
            int rc = idx ? PyDict_SetItem(seen[kind], ref, idx) : -1;
            Py_XDECREF(idx);
            if (rc < 0 || PyList_Append(order[kind], ref) < 0)
                goto done;
        } else
            index = PyLong_AsSsize_t(at);
        PyObject *slot = PyLong_FromSsize_t(index * 2 + kind);
        if (slot == NULL)
            goto done;
        PyTuple_SET_ITEM(pattern, i, slot);
    }
    out = Py_BuildValue("(ONN)", pattern, PyList_AsTuple(order[0]), PyList_AsTuple(order[1]));
done:
    Py_DECREF(fast);
    Py_XDECREF(seen[0]);
    Py_XDECREF(seen[1]);
    Py_XDECREF(order[0]);
    Py_XDECREF(order[1]);
    Py_XDECREF(pattern);
    return out;
}

/* ---- shape_of: a rank file's graph up to the ranks it names (replay/replicas.py) ---------------
 *
 *     shape_of(buf, pos) -> (a, b, refs) or None
 *         (twin: hotloops._shape_of_twin, the same walk in Python). The frames of `buf` from `pos`
 *         on (a file's nodes after its metadata), hashed field by field as they lie in the file
 *         (two 64-bit lanes, a and b), except what names another rank: the value of every
 *         attribute pg_name, comm_src and comm_dst (its name is hashed) goes to `refs` instead,
 *         in the file's order (pg_name as str, the others as int). Two ranks whose files give equal
 *         (a, b) and whose refs correspond run the same graph up to renaming ranks and groups.
 *         Each frame's start is marked in the lanes, not its length (a name's length changes it).
 *         None where a frame or attribute is malformed, or one of those three is of another kind:
 *         the rank is then like no other.
 */

typedef struct {
    uint64_t a, b;
} Lanes;

/* 8 bytes at a time (little-endian words), each lane multiplied and its high bits folded down,
 * then the rest byte by byte: a 4,096-rank set's files hash at about a third of the time */
static inline void lanes_add(Lanes *h, Ptr s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = (uint64_t)s[i] | (uint64_t)s[i + 1] << 8 | (uint64_t)s[i + 2] << 16 | (uint64_t)s[i + 3] << 24
                     | (uint64_t)s[i + 4] << 32 | (uint64_t)s[i + 5] << 40 | (uint64_t)s[i + 6] << 48
                     | (uint64_t)s[i + 7] << 56;
        h->a = (h->a ^ w) * 0x100000001b3ULL;
        h->a ^= h->a >> 32;
        h->b = (h->b + w + 1) * 0x9E3779B97F4A7C15ULL;
        h->b ^= h->b >> 29;
    }
    for (; i < n; i++) {
        h->a = (h->a ^ s[i]) * 0x100000001b3ULL; /* FNV-1a */
        h->b = (h->b + s[i] + 1) * 0x9E3779B97F4A7C15ULL;
        h->b ^= h->b >> 29;
    }
}

static inline void lanes_frame(Lanes *h)
{
    h->a = h->a * 0x9E3779B97F4A7C15ULL + 1;
    h->b = (h->b << 17 | h->b >> 47) ^ 0x85EBCA77C2B2AE63ULL;
}

static PyObject *shape_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "shape_of(buf, pos)");
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]), pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    Ptr buf = (Ptr)PyBytes_AS_STRING(args[0]);
    Lanes h = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL};
    PyObject *refs = PyList_New(0);
    if (refs == NULL)
        return NULL;
    if (pos < 0 || pos > size)
        goto punt;
    while (pos < size) {
        Ptr p = buf + pos, end = buf + size;
        uint64_t len;
        if (rd_varint(&p, end, &len) || len > (uint64_t)(end - p))
            goto punt;
        lanes_frame(&h); /* a frame begins (not its length, which the names left out change) */
        Ptr q = p, qe = p + len;
        while (q < qe) {
            Ptr at = q;
            Field fd;
            Attr a;
            if (next_field(&q, qe, &fd))
                goto punt;
            int ref = 0;
            if (fd.f == 10 && fd.w == 2) {
                if (read_attr(fd.s, fd.s + fd.n, &a))
                    goto punt;
                ref = name_is(&a, "pg_name", 7) ? 1 : (name_is(&a, "comm_src", 8) || name_is(&a, "comm_dst", 8)) ? 2 : 0;
            }
            if (!ref) {
                lanes_add(&h, at, q - at);
                continue;
            }
            lanes_add(&h, a.name, a.name_len);
            PyObject *v;
            if (ref == 1 && a.kind == 29)
                v = PyUnicode_DecodeUTF8((const char *)a.s, a.n, "strict");
            else if (ref == 2 && is_int_kind(a.kind))
                v = int_value(a.kind, a.v);
            else
                goto punt;
            if (v == NULL || PyList_Append(refs, v)) {
                Py_XDECREF(v);
                Py_DECREF(refs);
                return NULL;
            }
            Py_DECREF(v);
        }
        pos = qe - buf;
    }
    return Py_BuildValue("(KKN)", (unsigned long long)h.a, (unsigned long long)h.b, refs);
punt:
    Py_DECREF(refs);
    Py_RETURN_NONE;
}

/* The NodeInfo of a parsed node (a new reference, untracked by the cyclic GC), or NULL. */
/* metadata_fields(msg) -> (world_size, rank, conversion) of a GlobalMetadata message as
 * RankScan.read_metadata takes them (core/rankscan.py: an integer world_size, an integer rank of
 * 0 or more, a string conversion; None for each that is not so), or None: the reference decodes
 * it (core/shapes.py). It punts on a field other than the version (1) and the attributes (2), on
 * a message with no attribute (a legacy one has field 1 alone), and on anything protobuf might
 * refuse: every attribute is read as read_attr reads a node's, the version checked as UTF-8. A
 * large rank set's validation asks it for every replica: what was 16 us a rank in Python. */
static PyObject *attr_int(const Attr *a, int least_zero)
{
    PyObject *v = is_int_kind(a->kind) ? int_value(a->kind, a->v) : NULL;
    if (v == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (least_zero) {
        PyObject *zero = PyLong_FromLong(0);
        int neg = zero == NULL ? -1 : PyObject_RichCompareBool(v, zero, Py_LT);
        Py_XDECREF(zero);
        if (neg != 0) {
            Py_DECREF(v);
            if (neg < 0)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    return v;
}

static PyObject *metadata_fields(PyObject *self, PyObject *msg)
{
    if (!PyBytes_Check(msg))
        Py_RETURN_NONE;
    Ptr p = (Ptr)PyBytes_AS_STRING(msg), end = p + PyBytes_GET_SIZE(msg);
    Attr world, rank, conv, a;
    memset(&world, 0, sizeof world);
    memset(&rank, 0, sizeof rank);
    memset(&conv, 0, sizeof conv);
    int attrs = 0;
    Field fd;
    while (p < end) {
        if (next_field(&p, end, &fd) || fd.w != 2)
            Py_RETURN_NONE;
        if (fd.f == 1) {
            if (!utf8_ok(fd.s, fd.n))
                Py_RETURN_NONE;
        } else if (fd.f == 2) {
            if (read_attr(fd.s, fd.s + fd.n, &a))
                Py_RETURN_NONE;
            attrs++;
            if (name_is(&a, "world_size", 10))
                world = a;
            else if (name_is(&a, "rank", 4))
                rank = a;
            else if (name_is(&a, "conversion", 10))
                conv = a;
        } else
            Py_RETURN_NONE;
    }
    if (attrs == 0)
        Py_RETURN_NONE;
    PyObject *w = attr_int(&world, 0), *r = w ? attr_int(&rank, 1) : NULL, *c = NULL;
    if (r != NULL) {
        if (conv.kind == 29)
            c = PyUnicode_DecodeUTF8((const char *)conv.s, conv.n, "strict");
        else
            c = Py_NewRef(Py_None);
    }
    if (c == NULL) {
        Py_XDECREF(w);
        Py_XDECREF(r);
        return NULL;
    }
    return Py_BuildValue("(NNN)", w, r, c);
}

static PyObject *build_info(const Parsed *d, const Spec *sp)
{
    PyObject *items[18] = {NULL};
    items[0] = PyLong_FromUnsignedLongLong(d->id);
    items[1] = PyUnicode_DecodeUTF8((const char *)d->name, d->name_len, "strict");
    items[2] = PyLong_FromLongLong(d->type);
    items[3] = PyLong_FromUnsignedLongLong(d->dur);
    items[4] = PyBool_FromLong(d->is_cpu);
    for (int i = 0; i < N_SLOTS; i++) {
        /* NodeInfo's order: num_ops, tensor_size, comm_type, comm_size, comm_src, comm_dst, comm_tag
         * at 5..11; duration_ns, tid, stream at 15..17 */
        int at = i < 7 ? 5 + i : 8 + i;
        PyObject *val;
        if (d->slot_kind[i])
            val = int_value(d->slot_kind[i], d->slot_v[i]);
        else if (i == 0 || i == 1 || i == 3 || (i == 2 && d->type == sp->comm_coll))
            val = PyLong_FromLong(0);  /* num_ops, tensor_size, comm_size: 0; a COMM_COLL's comm_type: 0 */
        else
            val = Py_NewRef(Py_None);
        items[at] = val;
    }
    items[12] = d->pg ? PyUnicode_DecodeUTF8((const char *)d->pg, d->pg_len, "strict") : PyUnicode_New(0, 0);
    if (d->has_inv) {
        items[13] = PyTuple_New(d->n_inv);
        if (items[13] != NULL) {
            for (Py_ssize_t i = 0; i < d->n_inv; i++)
                PyTuple_SET_ITEM(items[13], i, Py_NewRef(d->inv[i] ? Py_True : Py_False));
            if (d->n_inv)
                PyObject_GC_UnTrack(items[13]);
        }
    } else
        items[13] = Py_NewRef(Py_None);
    items[14] = PyLong_FromUnsignedLongLong(d->start);
    for (int i = 0; i < 18; i++)
        if (items[i] == NULL)
            goto fail;
    PyTypeObject *t = sp->info_type;
    PyObject *info = t->tp_alloc(t, 18);
    if (info == NULL)
        goto fail;
    for (int i = 0; i < 18; i++)
        PyTuple_SET_ITEM(info, i, items[i]);
    /* Nothing in it can refer back to a container: untracked, the cyclic collector need not walk
     * it (as it untracks plain tuples of numbers) */
    PyObject_GC_UnTrack(info);
    return info;
fail:
    for (int i = 0; i < 18; i++)
        Py_XDECREF(items[i]);
    return NULL;
}

/* A tuple of ids (untracked), or NULL. */
static PyObject *id_tuple(const uint64_t *ids, int n)
{
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(ids[i]);
        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    if (n)
        PyObject_GC_UnTrack(t);
    return t;
}

static PyObject *decode_node(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyBytes_Check(args[0]) || !info_type_ok((PyTypeObject *)args[3]))
        Py_RETURN_NONE;
    Spec sp = {PyObject_IsTrue(args[1]), PyObject_IsTrue(args[2]), (PyTypeObject *)args[3],
               PyLong_AsLong(args[4]), PyLong_AsLong(args[5])};
    if (sp.use_data < 0 || sp.use_ctrl < 0 || PyErr_Occurred())
        return NULL;
    Parsed d;
    if (parse((Ptr)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), &sp, &d))
        Py_RETURN_NONE;
    PyObject *deps = id_tuple(d.deps, d.n_deps), *info = deps ? build_info(&d, &sp) : NULL;
    if (info == NULL) {
        Py_XDECREF(deps);
        return NULL;
    }
    return Py_BuildValue("(KNN)", (unsigned long long)d.id, deps, info);
}

/* ---- Window: a feeder's window of loaded nodes, compact (feed/feeder.py) -----------------------
 *
 *     Window(eager, use_data, use_ctrl, info_type, max_type, comm_coll, bitmap_limit, bits, finished,
 *            unseen, ready, heappush, lazy_info)
 *         (twin: the feeder's reference window, a dict of `_Loaded` records that `_link_reference`
 *         and `_finish_record` change) The nodes one feeder has read and not finished, held as C
 *         records, not Python objects: per node a 24-byte record (id, waiting count and state,
 *         its children as a chain of 8-byte edges) and in an arena its file offset, its
 *         dependencies and (eager) the NodeInfo's fields packed, its name an id in a table of
 *         names the whole process shares; a NodeInfo is made each time it is asked for (a few
 *         hundred ns; a replayer asks once or twice a node). About 60 bytes a node of a
 *         generated GPT where the dict of records, NodeInfos and numbers held 650. A lazy
 *         window keeps each message in the arena instead, and the NodeInfo the reference's way
 *         (lazy_info(message), kept once made); so do the nodes the reference decoded (`link`),
 *         in `objs`. finished: the feeder's FinishedIds, bits its bitmap (ids from bitmap_limit
 *         on go through `in finished` and `finished.add`); unseen: absent id -> ids waiting for
 *         it; ready: the heap of issuable ids (heappush).
 *
 *     A mapping of id -> record (`Record`, a view with the `_Loaded` slots: raw, info, deps,
 *     waiting, children, state; waiting, state and info settable), in the order the nodes were
 *     read; and link, info, nbytes, trim (their docstrings). load_node, load_frames and
 *     finish_node below change it as the reference changes its dict. Finished records leave
 *     holes that are compacted away once they outnumber the live ones.
 */
#define DEAD 3

#define MAX_WAITING ((1u << 26) - 1)

/* 20 bytes a node; the rest lies in its span of the arena: [offset] [message] dependencies [info]
 * (offset: where the message lies in the file, kept by an eager window; message: a lazy
 * window's, or an eager one's given no offset; info: its NodeInfo's fields packed) */
typedef struct {
    uint32_t id_lo, id_hi; /* its id (RID), in halves: the record packs to 20 bytes */
    uint32_t data;        /* its span of the arena, up to the next record's */
    uint32_t head;        /* its children, the latest first: a chain of edges (1-based; 0 none) */
    uint32_t waiting : 26;
    uint32_t state : 2;   /* 0 blocked, 1 issuable, 2 in flight, DEAD finished */
    uint32_t packed : 1;  /* the span holds its NodeInfo's fields */
    uint32_t hasoff : 1, hasraw : 1;
    uint32_t hasobj : 1;  /* `objs` holds its NodeInfo: the reference's, or a lazy window's made */
} Rec;

#define RID(r) ((uint64_t)(r)->id_hi << 32 | (r)->id_lo)

typedef struct {
    uint32_t child, next; /* child: a record's index; next: the next edge (1-based; 0 none) */
} Edge;

typedef struct {
    PyObject_HEAD
    Spec sp;              /* holds a reference to info_type */
    uint64_t limit;
    PyObject *bits, *finished, *unseen, *ready, *heappush, *lazy_info;
    PyObject *objs;       /* id -> NodeInfo of the records with hasobj (rare), or NULL */
    Rec *recs;
    uint32_t *slots;      /* open addressing, linear probing: a record's index + 1; 0 empty */
    Edge *edges;
    unsigned char *arena;
    uint32_t n_recs, cap_recs, n_live;
    uint32_t cap_slots;   /* a power of 2, or 0: no table yet, the records are scanned */
    uint32_t n_edges, cap_edges, free_edge;
    uint32_t arena_len, arena_cap, arena_dead;
    int eager;
} Window;

static PyTypeObject WindowType;
static PyTypeObject RecordType;

static inline uint32_t hslot(uint64_t id, uint32_t mask)
{
    return (uint32_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

/* -- open addressing, shared by a window's id table and the process's name table: a slot holds a
 * nonzero value (0: empty) whose key `key(ctx, value)` hashes to its home slot; linear probing,
 * a load of at most 3/4, backward-shift deletion -------------------------------------------- */
typedef uint64_t (*SlotKey)(const void *ctx, uint32_t value);

/* The smallest power of two from `least` that holds `live` values at a load of at most 3/4. */
static uint32_t slots_capacity(uint32_t live, uint32_t least)
{
    uint32_t cap = least;
    while (cap * 3 < live * 4 + 4)
        cap <<= 1;
    return cap;
}

static inline void slots_put(uint32_t *slots, uint32_t mask, uint64_t key, uint32_t value)
{
    uint32_t i = hslot(key, mask);
    while (slots[i])
        i = (i + 1) & mask;
    slots[i] = value;
}

/* Empty slot i so that the table is as if its value had never been placed: each value after it
 * in the run moves back into the hole unless its home lies between the hole and it. */
static inline void slots_unplace(uint32_t *slots, uint32_t mask, uint32_t i, SlotKey key, const void *ctx)
{
    for (uint32_t j = i;;) {
        j = (j + 1) & mask;
        uint32_t s = slots[j];
        if (s == 0)
            break;
        uint32_t k = hslot(key(ctx, s), mask);
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
            continue; /* its home lies between the hole and it: it stays */
        slots[i] = s;
        i = j;
    }
    slots[i] = 0;
}

/* Up to this many live records a window has no table: a scan of them is as quick as a probe, and
 * a held rank file of a few dozen nodes saves the table's bytes (a tenth of its window) */
#define SCANNED 64

/* The record of id, or -1; *at: its hash slot */
static inline int64_t w_find(const Window *w, uint64_t id, uint32_t *at)
{
    if (w->cap_slots == 0) {
        for (uint32_t i = 0; i < w->n_recs; i++)
            if (RID(&w->recs[i]) == id && w->recs[i].state != DEAD)
                return i;
        return -1;
    }
    uint32_t mask = w->cap_slots - 1;
    for (uint32_t i = hslot(id, mask);; i = (i + 1) & mask) {
        uint32_t s = w->slots[i];
        if (s == 0)
            return -1;
        if (RID(&w->recs[s - 1]) == id) {
            if (at)
                *at = i;
            return s - 1;
        }
    }
}

static void w_place(Window *w, uint32_t index)
{
    slots_put(w->slots, w->cap_slots - 1, RID(&w->recs[index]), index + 1);
}

/* The table sized for `live` records (load at most 3/4), every live record placed again. */
static int w_rehash(Window *w, uint32_t live)
{
    uint32_t cap = slots_capacity(live, 8);
    uint32_t *slots = PyMem_Calloc(cap, sizeof *slots);
    if (slots == NULL) {
        PyErr_NoMemory();
        return FAIL;
    }
    PyMem_Free(w->slots);
    w->slots = slots;
    w->cap_slots = cap;
    for (uint32_t i = 0; i < w->n_recs; i++)
        if (w->recs[i].state != DEAD)
            w_place(w, i);
    return 0;
}

static uint64_t w_key(const void *w, uint32_t value)
{
    return RID(&((const Window *)w)->recs[value - 1]);
}

static void w_unplace(Window *w, uint32_t i)
{
    slots_unplace(w->slots, w->cap_slots - 1, i, w_key, w);
}

static int grow(void **p, uint32_t *cap, uint32_t need, size_t item)
{
    if (need <= *cap)
        return 0;
    uint64_t c = *cap ? *cap : 8;
    while (c < need)
        c *= 2;
    if (c > UINT32_MAX - 1 || c * item > PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
        return FAIL;
    }
    void *q = PyMem_Realloc(*p, c * item);
    if (q == NULL) {
        PyErr_NoMemory();
        return FAIL;
    }
    *p = q;
    *cap = (uint32_t)c;
    return 0;
}

/* -- names: one copy of each node name for all the windows of the process, however many nodes and
 * ranks repeat it (the ranks of one job name their nodes alike: 925 of a generated GPT rank's
 * 4,100 window bytes were names), counted, freed with the last node that uses it ------------ */
typedef struct {
    uint64_t hash;
    uint32_t refs, len;
    char s[];
} Atom;

static Atom **atoms = NULL;      /* by id - 1; a free id holds (next free id << 1 | 1) */
static uint32_t n_atoms = 0, cap_atoms = 0, atom_free = 0, atoms_live = 0;
static uint32_t *atom_slots = NULL; /* open addressing: an id, 0 empty */
static uint32_t cap_atom_slots = 0;

static inline uint64_t name_hash(Ptr s, Py_ssize_t n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

static void atom_place(uint32_t id)
{
    slots_put(atom_slots, cap_atom_slots - 1, atoms[id - 1]->hash, id);
}

static uint64_t atom_key(const void *unused, uint32_t id)
{
    (void)unused;
    return atoms[id - 1]->hash;
}

static int atoms_rehash(uint32_t live)
{
    uint32_t cap = slots_capacity(live, 64);
    uint32_t *slots = PyMem_RawCalloc(cap, sizeof *slots);
    if (slots == NULL) {
        PyErr_NoMemory();
        return FAIL;
    }
    PyMem_RawFree(atom_slots);
    atom_slots = slots;
    cap_atom_slots = cap;
    for (uint32_t id = 1; id <= n_atoms; id++)
        if (!((uintptr_t)atoms[id - 1] & 1))
            atom_place(id);
    return 0;
}

/* The id of the name (s, n), counted once more: a new one made if none is live; 0 on an error. */
static uint32_t atom_get(Ptr s, Py_ssize_t n)
{
    if (n > UINT32_MAX) {
        PyErr_NoMemory();
        return 0;
    }
    uint64_t h = name_hash(s, n);
    if (cap_atom_slots) {
        uint32_t mask = cap_atom_slots - 1;
        for (uint32_t i = hslot(h, mask); atom_slots[i]; i = (i + 1) & mask) {
            Atom *a = atoms[atom_slots[i] - 1];
            if (a->hash == h && a->len == n && memcmp(a->s, s, n) == 0) {
                a->refs++;
                return atom_slots[i];
            }
        }
    }
    if ((atoms_live + 1) * 4 > cap_atom_slots * 3 && atoms_rehash(atoms_live + 1))
        return 0;
    uint32_t id = atom_free;
    if (id == 0 && grow((void **)&atoms, &cap_atoms, n_atoms + 1, sizeof *atoms))
        return 0;
    Atom *a = PyMem_RawMalloc(sizeof(Atom) + (size_t)n);
    if (a == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    if (id)
        atom_free = (uint32_t)((uintptr_t)atoms[id - 1] >> 1);
    else
        id = ++n_atoms;
    a->hash = h;
    a->refs = 1;
    a->len = (uint32_t)n;
    memcpy(a->s, s, n);
    atoms[id - 1] = a;
    atoms_live++;
    atom_place(id);
    return id;
}

/* One use of the name fewer: freed with its last. */
static void atom_drop(uint32_t id)
{
    Atom *a = atoms[id - 1];
    if (--a->refs)
        return;
    uint32_t mask = cap_atom_slots - 1, i = hslot(a->hash, mask);
    while (atom_slots[i] != id)
        i = (i + 1) & mask;
    slots_unplace(atom_slots, mask, i, atom_key, NULL);
    PyMem_RawFree(a);
    atoms[id - 1] = (Atom *)((uintptr_t)atom_free << 1 | 1);
    atom_free = id;
    atoms_live--;
}

/* -- the arena: a record's dependencies, then (packed) its NodeInfo's fields ---------------------- */
static inline void put_vi(unsigned char **q, uint64_t v)
{
    while (v >= 0x80) {
        *(*q)++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *(*q)++ = (unsigned char)v;
}

static inline uint64_t get_vi(Ptr *q)
{
    uint64_t v = 0;
    for (int s = 0;; s += 7) {
        unsigned b = *(*q)++;
        v |= (uint64_t)(b & 0x7F) << s;
        if (b < 0x80)
            return v;
    }
}

/* Room for n more bytes of arena; 0 or FAIL. */
static int arena_room(Window *w, uint64_t n)
{
    if ((uint64_t)w->arena_len + n > UINT32_MAX - 1) {
        PyErr_NoMemory();
        return FAIL;
    }
    return grow((void **)&w->arena, &w->arena_cap, w->arena_len + (uint32_t)n, 1);
}

/* The dependencies (and with d, the info's fields) of record r appended to the arena. */
static int pack(Window *w, Rec *r, int64_t offset, Ptr msg, Py_ssize_t msg_len, const uint64_t *deps,
                Py_ssize_t n_deps, const Parsed *d)
{
    uint64_t need = 10 + 10 * (uint64_t)n_deps + 10 + (msg ? 10 + (uint64_t)msg_len : 0);
    if (d)
        need += 2 + 20 + 2 + 11 * N_SLOTS + 20 + d->pg_len + 2 + 32;
    if (arena_room(w, need))
        return FAIL;
    uint32_t name = 0;
    if (d && (name = atom_get(d->name, d->name_len)) == 0)
        return FAIL;
    unsigned char *start = w->arena + w->arena_len, *q = start;
    if (offset >= 0)
        put_vi(&q, (uint64_t)offset);
    if (msg) {
        put_vi(&q, (uint64_t)msg_len);
        memcpy(q, msg, msg_len);
        q += msg_len;
    }
    put_vi(&q, (uint64_t)n_deps);
    for (Py_ssize_t i = 0; i < n_deps; i++)
        put_vi(&q, deps[i]);
    if (d) {
        unsigned mask = 0;
        for (int i = 0; i < N_SLOTS; i++)
            if (d->slot_kind[i])
                mask |= 1u << i;
        put_vi(&q, (uint64_t)d->type);
        *q++ = (unsigned char)(d->is_cpu | (d->pg != NULL) << 1 | d->has_inv << 2);
        put_vi(&q, d->dur);
        put_vi(&q, d->start);
        put_vi(&q, mask);
        for (int i = 0; i < N_SLOTS; i++)
            if (d->slot_kind[i]) {
                *q++ = (unsigned char)d->slot_kind[i];
                put_vi(&q, d->slot_v[i]);
            }
        put_vi(&q, name);
        if (d->pg) {
            put_vi(&q, (uint64_t)d->pg_len);
            memcpy(q, d->pg, d->pg_len);
            q += d->pg_len;
        }
        if (d->has_inv) {
            put_vi(&q, (uint64_t)d->n_inv);
            for (Py_ssize_t i = 0; i < d->n_inv; i += 8) {
                unsigned char b = 0;
                for (int k = 0; k < 8 && i + k < d->n_inv; k++)
                    b |= (unsigned char)(d->inv[i + k] << k);
                *q++ = b;
            }
        }
    }
    r->data = w->arena_len;
    r->packed = d != NULL;
    r->hasoff = offset >= 0;
    r->hasraw = msg != NULL;
    w->arena_len += (uint32_t)(q - start);
    return 0;
}

/* Where record r's span holds its message (*n bytes), or NULL */
static Ptr rec_msg(const Window *w, const Rec *r, Py_ssize_t *n)
{
    Ptr q = w->arena + r->data;
    if (r->hasoff)
        get_vi(&q);
    if (!r->hasraw)
        return NULL;
    *n = (Py_ssize_t)get_vi(&q);
    return q;
}

/* Where record r's span holds its dependencies */
static Ptr rec_deps_at(const Window *w, const Rec *r)
{
    Ptr q = w->arena + r->data;
    if (r->hasoff)
        get_vi(&q);
    if (r->hasraw)
        q += get_vi(&q);
    return q;
}

static int64_t rec_offset(const Window *w, const Rec *r)
{
    Ptr q = w->arena + r->data;
    return r->hasoff ? (int64_t)get_vi(&q) : -1;
}

/* The packed info of record r read back into *d (spans into the arena: use before it changes). */
static void unpack(const Window *w, const Rec *r, uint64_t id, Parsed *d)
{
    Ptr q = rec_deps_at(w, r);
    uint64_t n = get_vi(&q);
    for (uint64_t i = 0; i < n; i++)
        get_vi(&q);
    d->id = id;
    d->type = (int64_t)get_vi(&q);
    unsigned flags = *q++;
    d->is_cpu = flags & 1;
    d->has_inv = flags >> 2 & 1;
    d->dur = get_vi(&q);
    d->start = get_vi(&q);
    unsigned mask = (unsigned)get_vi(&q);
    for (int i = 0; i < N_SLOTS; i++) {
        d->slot_kind[i] = 0;
        if (mask >> i & 1) {
            d->slot_kind[i] = *q++;
            d->slot_v[i] = get_vi(&q);
        }
    }
    Atom *a = atoms[get_vi(&q) - 1];
    d->name = (Ptr)a->s;
    d->name_len = a->len;
    d->pg = NULL;
    d->pg_len = 0;
    if (flags & 2) {
        d->pg_len = (Py_ssize_t)get_vi(&q);
        d->pg = q;
        q += d->pg_len;
    }
    d->n_inv = 0;
    if (d->has_inv) {
        d->n_inv = (Py_ssize_t)get_vi(&q);
        for (Py_ssize_t i = 0; i < d->n_inv; i++)
            d->inv[i] = q[i >> 3] >> (i & 7) & 1;
    }
}

/* The name (atom id) a packed record holds */
static uint32_t packed_name(const Window *w, const Rec *r)
{
    Ptr q = rec_deps_at(w, r);
    uint64_t n = get_vi(&q);
    for (uint64_t i = 0; i < n; i++)
        get_vi(&q);
    get_vi(&q);  /* type */
    q++;         /* flags */
    get_vi(&q);  /* dur */
    get_vi(&q);  /* start */
    unsigned mask = (unsigned)get_vi(&q);
    for (int i = 0; i < N_SLOTS; i++)
        if (mask >> i & 1) {
            q++;
            get_vi(&q);
        }
    return (uint32_t)get_vi(&q);
}

static PyObject *rec_deps(const Window *w, const Rec *r)
{
    Ptr q = rec_deps_at(w, r);
    uint64_t n = get_vi(&q);
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    if (t == NULL)
        return NULL;
    for (uint64_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(get_vi(&q));
        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, x);
    }
    return t;
}

/* -- linking a node into the window ------------------------------------------------------------ */
static inline int bit_set(PyObject *bits, uint64_t i)
{
    return (Py_ssize_t)(i >> 3) < PyByteArray_GET_SIZE(bits) &&
           (((unsigned char *)PyByteArray_AS_STRING(bits))[i >> 3] >> (i & 7) & 1);
}

/* Whether id has finished (FinishedIds.__contains__): 1, 0 or FAIL. */
static int w_finished(const Window *w, uint64_t id)
{
    if (id < w->limit)
        return bit_set(w->bits, id);
    PyObject *x = PyLong_FromUnsignedLongLong(id);
    if (x == NULL)
        return FAIL;
    int r = PySequence_Contains(w->finished, x); /* FinishedIds: its set of large ids */
    Py_DECREF(x);
    return r < 0 ? FAIL : r;
}

static int add_child(Window *w, uint32_t parent, uint32_t child)
{
    uint32_t e = w->free_edge;
    if (e)
        w->free_edge = w->edges[e - 1].next;
    else {
        if (grow((void **)&w->edges, &w->cap_edges, w->n_edges + 1, sizeof(Edge)))
            return FAIL;
        e = ++w->n_edges;
    }
    w->edges[e - 1].child = child;
    w->edges[e - 1].next = w->recs[parent].head;
    w->recs[parent].head = e;
    return 0;
}

/* nid appended to `lists[key]`, a new list if absent (dict.setdefault(key, []).append(nid)) */
static int append_to(PyObject *lists, uint64_t key_id, uint64_t nid_id)
{
    PyObject *key = PyLong_FromUnsignedLongLong(key_id), *nid = PyLong_FromUnsignedLongLong(nid_id);
    int r = FAIL;
    if (key == NULL || nid == NULL)
        goto out;
    PyObject *l = PyDict_GetItemWithError(lists, key);
    if (l == NULL) {
        if (PyErr_Occurred() || (l = PyList_New(0)) == NULL)
            goto out;
        PyObject_GC_UnTrack(l); /* a list of ids: the cyclic collector need not walk it */
        int s = PyDict_SetItem(lists, key, l);
        Py_DECREF(l); /* the dict holds it */
        if (s < 0)
            goto out;
    }
    r = PyList_Append(l, nid) < 0 ? FAIL : 0;
out:
    Py_XDECREF(key);
    Py_XDECREF(nid);
    return r;
}

static int push_ready(Window *w, uint64_t id)
{
    PyObject *x = PyLong_FromUnsignedLongLong(id);
    if (x == NULL)
        return FAIL;
    PyObject *r = PyObject_CallFunctionObjArgs(w->heappush, w->ready, x, NULL);
    Py_DECREF(x);
    if (r == NULL)
        return FAIL;
    Py_DECREF(r);
    return 0;
}

/* The NodeInfo kept for record r in `objs` (info NULL: none kept): 0 or FAIL */
static int rec_keep(Window *w, Rec *r, PyObject *info)
{
    PyObject *key = PyLong_FromUnsignedLongLong(RID(r));
    if (key == NULL)
        return FAIL;
    int s = 0;
    if (info != NULL) {
        if (w->objs == NULL && (w->objs = PyDict_New()) == NULL)
            s = FAIL;
        else
            s = PyDict_SetItem(w->objs, key, info) < 0 ? FAIL : 0;
        r->hasobj = s == 0;
    } else if (r->hasobj) {
        s = PyDict_DelItem(w->objs, key) < 0 ? FAIL : 0;
        r->hasobj = 0;
    }
    Py_DECREF(key);
    return s;
}

/* A new node linked in as `_link_reference` links it: its record (with offset >= 0 its file
 * offset, with msg its message, with info a NodeInfo to keep, with d its info packed), linked
 * to its loaded parents or to `unseen`, given the children that waited for it, pushed on `ready`
 * if nothing holds it. The caller has seen that the id is new. */
static int w_link(Window *w, uint64_t id, int64_t offset, Ptr msg, Py_ssize_t msg_len, PyObject *info,
                  const uint64_t *deps, Py_ssize_t n_deps, const Parsed *d)
{
    if (n_deps > MAX_WAITING) {
        PyErr_SetString(PyExc_OverflowError, "a node with more dependencies than the window counts");
        return FAIL;
    }
    if (grow((void **)&w->recs, &w->cap_recs, w->n_recs + 1, sizeof(Rec)) ||
        (w->n_live + 1 > SCANNED && (w->n_live + 1) * 4 > w->cap_slots * 3 && w_rehash(w, w->n_live + 1)))
        return FAIL;
    uint32_t me = w->n_recs;
    Rec *r = &w->recs[me];
    memset(r, 0, sizeof *r);
    r->id_lo = (uint32_t)id;
    r->id_hi = (uint32_t)(id >> 32);
    if (pack(w, r, offset, msg, msg_len, deps, n_deps, d))
        return FAIL;
    if (info != NULL && rec_keep(w, r, info)) {
        if (d)
            atom_drop(packed_name(w, r));
        w->arena_len = r->data;
        return FAIL;
    }
    w->n_recs++;
    w->n_live++;
    if (w->cap_slots) /* before its parents are looked up: a node may wait for itself */
        w_place(w, me);
    uint32_t waiting = 0;
    for (Py_ssize_t i = 0; i < n_deps; i++) {
        int64_t parent = w_find(w, deps[i], NULL);
        if (parent >= 0) {
            waiting++;
            if (add_child(w, (uint32_t)parent, me))
                return FAIL;
            continue;
        }
        int done = w_finished(w, deps[i]);
        if (done == FAIL)
            return FAIL;
        if (!done) {
            waiting++;
            if (append_to(w->unseen, deps[i], id))
                return FAIL;
        }
    }
    if (PyDict_GET_SIZE(w->unseen)) { /* the nodes read earlier that wait for this one */
        PyObject *key = PyLong_FromUnsignedLongLong(id);
        if (key == NULL)
            return FAIL;
        PyObject *waiters = PyDict_GetItemWithError(w->unseen, key);
        if (waiters != NULL) {
            Py_INCREF(waiters);
            int r2 = PyDict_DelItem(w->unseen, key);
            for (Py_ssize_t i = 0; r2 == 0 && i < PyList_GET_SIZE(waiters); i++) {
                uint64_t c = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(waiters, i));
                int64_t ci = PyErr_Occurred() ? -1 : w_find(w, c, NULL);
                if (ci < 0) {
                    if (!PyErr_Occurred())
                        PyErr_SetObject(PyExc_KeyError, PyList_GET_ITEM(waiters, i));
                    r2 = FAIL;
                } else
                    r2 = add_child(w, me, (uint32_t)ci);
            }
            Py_DECREF(waiters);
            if (r2) {
                Py_DECREF(key);
                return FAIL;
            }
        } else if (PyErr_Occurred()) {
            Py_DECREF(key);
            return FAIL;
        }
        Py_DECREF(key);
    }
    r = &w->recs[me];
    r->waiting = waiting;
    r->state = waiting == 0;
    return waiting == 0 ? push_ready(w, id) : 0;
}

/* The NodeInfo of record i (a new reference): the one it holds, or made from the arena (kept
 * while the node is in flight); a lazy window's made by lazy_info from the message, and kept. */
/* The NodeInfo of record i (a new reference): the one `objs` keeps, or made from the packed fields
 * (each time: nothing per node stays a Python object), or a lazy window's made from its message by
 * lazy_info (and kept, as the reference keeps it); None where there is none yet. */
static PyObject *w_info(Window *w, uint32_t i)
{
    Rec *r = &w->recs[i];
    if (r->hasobj) {
        PyObject *key = PyLong_FromUnsignedLongLong(RID(r));
        if (key == NULL)
            return NULL;
        PyObject *have = PyDict_GetItemWithError(w->objs, key);
        Py_DECREF(key);
        if (have != NULL)
            return Py_NewRef(have);
        if (PyErr_Occurred())
            return NULL;
    }
    if (r->packed) {
        Parsed d;
        unpack(w, r, RID(r), &d);
        return build_info(&d, &w->sp);
    }
    Py_ssize_t n;
    Ptr m = rec_msg(w, r, &n);
    if (m == NULL)
        Py_RETURN_NONE;
    PyObject *msg = PyBytes_FromStringAndSize((const char *)m, n);
    if (msg == NULL)
        return NULL;
    PyObject *info = PyObject_CallOneArg(w->lazy_info, msg);
    Py_DECREF(msg);
    if (info == NULL || rec_keep(w, &w->recs[i], info)) {
        Py_XDECREF(info);
        return NULL;
    }
    return info;
}

/* -- compaction: finished records and their arena bytes given back -------------------------------- */
/* The arena bytes of record i: up to the next record's (spans lie in record order, dead ones too) */
static inline uint32_t span(const Window *w, uint32_t i)
{
    return (i + 1 < w->n_recs ? w->recs[i + 1].data : w->arena_len) - w->recs[i].data;
}

static int w_compact(Window *w)
{
    uint32_t *remap = PyMem_Malloc((size_t)(w->n_recs ? w->n_recs : 1) * sizeof *remap);
    if (remap == NULL) {
        PyErr_NoMemory();
        return FAIL;
    }
    uint32_t j = 0, pos = 0;
    for (uint32_t i = 0; i < w->n_recs; i++) {
        Rec *r = &w->recs[i];
        if (r->state == DEAD) {
            remap[i] = UINT32_MAX;
            continue;
        }
        uint32_t len = span(w, i);
        memmove(w->arena + pos, w->arena + r->data, len); /* spans lie in record order */
        r->data = pos;
        pos += len;
        remap[i] = j;
        if (i != j)
            w->recs[j] = *r;
        j++;
    }
    for (uint32_t i = 0; i < j; i++)
        for (uint32_t e = w->recs[i].head; e; e = w->edges[e - 1].next)
            w->edges[e - 1].child = remap[w->edges[e - 1].child];
    PyMem_Free(remap);
    w->n_recs = j;
    w->arena_len = pos;
    w->arena_dead = 0;
    return w->cap_slots ? w_rehash(w, j) : 0;
}

/* Finish the in-flight record i (the caller has marked the id finished): its children's counts
 * lowered, those freed pushed on `ready` and appended to `freed`; the record dropped. */
static int w_finish(Window *w, uint32_t i, PyObject *freed)
{
    Rec *r = &w->recs[i];
    if (r->hasobj && rec_keep(w, r, NULL))
        return FAIL;
    uint32_t at = 0;
    if (w->cap_slots) {
        w_find(w, RID(r), &at);
        w_unplace(w, at);
    }
    r->state = DEAD;
    w->n_live--;
    /* the children in the order they were added (the chain holds the latest first) */
    uint32_t small[16], *order = small, n = 0, last = 0;
    for (uint32_t e = r->head; e; last = e, e = w->edges[e - 1].next)
        n++;
    if (n > 16 && (order = PyMem_Malloc((size_t)n * sizeof *order)) == NULL) {
        PyErr_NoMemory();
        return FAIL;
    }
    uint32_t k = n;
    for (uint32_t e = r->head; e; e = w->edges[e - 1].next)
        order[--k] = w->edges[e - 1].child;
    int fail = 0;
    for (k = 0; k < n && !fail; k++) {
        Rec *c = &w->recs[order[k]];
        if (--c->waiting == 0 && c->state == 0) {
            c->state = 1;
            PyObject *x = PyLong_FromUnsignedLongLong(RID(c)), *res = NULL;
            if (x != NULL && PyList_Append(freed, x) == 0)
                res = PyObject_CallFunctionObjArgs(w->heappush, w->ready, x, NULL);
            Py_XDECREF(x);
            fail = res == NULL;
            Py_XDECREF(res);
        }
    }
    if (order != small)
        PyMem_Free(order);
    if (fail)
        return FAIL;
    r = &w->recs[i];
    if (last) { /* the chain onto the free list */
        w->edges[last - 1].next = w->free_edge;
        w->free_edge = r->head;
    }
    r->head = 0;
    if (r->packed)
        atom_drop(packed_name(w, r));
    w->arena_dead += span(w, i);
    uint32_t dead = w->n_recs - w->n_live;
    if (dead >= 64 && dead > w->n_live)
        return w_compact(w);
    if (w->n_live == 0) /* nothing left, not even an edge in use */
        w->n_recs = w->arena_len = w->arena_dead = w->n_edges = w->free_edge = 0;
    return 0;
}

/* The id as a u64: 1, or 0 if it is no such id (not an int, negative, too large; nothing set). */
static int as_id(PyObject *o, uint64_t *id)
{
    if (!PyLong_Check(o))
        return 0;
    *id = PyLong_AsUnsignedLongLong(o);
    if (*id == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* -- the type ------------------------------------------------------------------------------------ */
static PyObject *Window_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *eager, *use_data, *use_ctrl, *info_type, *max_type, *comm_coll, *limit, *bits, *finished, *unseen,
        *ready, *heappush, *lazy_info;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Window takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "Window", 13, 13, &eager, &use_data, &use_ctrl, &info_type, &max_type,
                           &comm_coll, &limit, &bits, &finished, &unseen, &ready, &heappush, &lazy_info))
        return NULL;
    if (!info_type_ok((PyTypeObject *)info_type) || !PyByteArray_Check(bits) ||
        !PyDict_CheckExact(unseen) || !PyList_CheckExact(ready)) {
        PyErr_SetString(PyExc_TypeError, "Window: not a feeder's containers");
        return NULL;
    }
    Window *w = (Window *)type->tp_alloc(type, 0);
    if (w == NULL)
        return NULL;
    w->sp.use_data = PyObject_IsTrue(use_data);
    w->sp.use_ctrl = PyObject_IsTrue(use_ctrl);
    w->sp.info_type = (PyTypeObject *)info_type;
    w->sp.max_type = PyLong_AsLong(max_type);
    w->sp.comm_coll = PyLong_AsLong(comm_coll);
    w->eager = PyObject_IsTrue(eager);
    w->limit = PyLong_AsUnsignedLongLong(limit);
    Py_INCREF(info_type); /* released with the window (sp.info_type) */
    w->bits = Py_NewRef(bits);
    w->finished = Py_NewRef(finished);
    w->unseen = Py_NewRef(unseen);
    w->ready = Py_NewRef(ready);
    w->heappush = Py_NewRef(heappush);
    w->lazy_info = Py_NewRef(lazy_info);
    if (PyErr_Occurred() || w->sp.use_data < 0 || w->sp.use_ctrl < 0 || w->eager < 0) {
        Py_DECREF(w);
        return NULL;
    }
    return (PyObject *)w;
}

static void Window_dealloc(Window *w)
{
    for (uint32_t i = 0; i < w->n_recs; i++)
        if (w->recs[i].packed && w->recs[i].state != DEAD)
            atom_drop(packed_name(w, &w->recs[i]));
    Py_XDECREF(w->objs);
    PyMem_Free(w->recs);
    PyMem_Free(w->slots);
    PyMem_Free(w->edges);
    PyMem_Free(w->arena);
    Py_XDECREF(w->sp.info_type);
    Py_XDECREF(w->bits);
    Py_XDECREF(w->finished);
    Py_XDECREF(w->unseen);
    Py_XDECREF(w->ready);
    Py_XDECREF(w->heappush);
    Py_XDECREF(w->lazy_info);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static Py_ssize_t Window_len(Window *w)
{
    return w->n_live;
}

static int64_t w_lookup(Window *w, PyObject *key)
{
    uint64_t id;
    return as_id(key, &id) ? w_find(w, id, NULL) : -1;
}

typedef struct {
    PyObject_HEAD
    Window *w;
    uint64_t id;
} Record;

static PyObject *record_of(Window *w, uint64_t id)
{
    Record *r = PyObject_New(Record, &RecordType);
    if (r == NULL)
        return NULL;
    r->w = (Window *)Py_NewRef(w);
    r->id = id;
    return (PyObject *)r;
}

static PyObject *Window_getitem(Window *w, PyObject *key)
{
    int64_t i = w_lookup(w, key);
    if (i < 0) {
        PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    return record_of(w, RID(&w->recs[i]));
}

static int Window_contains(Window *w, PyObject *key)
{
    return w_lookup(w, key) >= 0;
}

static PyObject *Window_iter(Window *w)
{
    PyObject *ids = PyList_New(0);
    if (ids == NULL)
        return NULL;
    for (uint32_t i = 0; i < w->n_recs; i++) {
        if (w->recs[i].state == DEAD)
            continue;
        PyObject *x = PyLong_FromUnsignedLongLong(RID(&w->recs[i]));
        if (x == NULL || PyList_Append(ids, x) < 0) {
            Py_XDECREF(x);
            Py_DECREF(ids);
            return NULL;
        }
        Py_DECREF(x);
    }
    PyObject *it = PyObject_GetIter(ids);
    Py_DECREF(ids);
    return it;
}

static PyObject *Window_get(Window *w, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(id[, default])");
        return NULL;
    }
    int64_t i = w_lookup(w, args[0]);
    if (i < 0)
        return Py_NewRef(nargs == 2 ? args[1] : Py_None);
    return record_of(w, RID(&w->recs[i]));
}

static PyObject *Window_info(Window *w, PyObject *key)
{
    int64_t i = w_lookup(w, key);
    if (i < 0) {
        PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    return w_info(w, (uint32_t)i);
}

/* taken(id): an issuable node now in flight (ETFeeder.next_issuable, without a Record view) */
static PyObject *Window_taken(Window *w, PyObject *key)
{
    int64_t i = w_lookup(w, key);
    if (i < 0) {
        PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    w->recs[i].state = 2;
    Py_RETURN_NONE;
}

/* link(id, deps, info, raw): a node the reference decoded, linked in as _link_reference links it */
static PyObject *Window_link(Window *w, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t id;
    if (nargs != 4 || !as_id(args[0], &id) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "link(id, deps, info, raw): id an int of 64 bits, deps a tuple");
        return NULL;
    }
    if (w_find(w, id, NULL) >= 0) {
        PyErr_Format(PyExc_ValueError, "node %llu is loaded already", (unsigned long long)id);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args[1]);
    uint64_t *deps = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *deps);
    if (deps == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++)
        if (!as_id(PyTuple_GET_ITEM(args[1], i), &deps[i])) {
            PyMem_Free(deps);
            PyErr_SetString(PyExc_TypeError, "link: a dependency that is not an id of 64 bits");
            return NULL;
        }
    PyObject *info = args[2] == Py_None ? NULL : args[2];
    int64_t offset = -1;
    Ptr msg = NULL;
    Py_ssize_t msg_len = 0;
    if (PyLong_Check(args[3])) {
        offset = PyLong_AsLongLong(args[3]);
        if (offset < 0) {
            PyMem_Free(deps);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "link: a negative offset");
            return NULL;
        }
    } else if (PyBytes_Check(args[3])) {
        msg = (Ptr)PyBytes_AS_STRING(args[3]);
        msg_len = PyBytes_GET_SIZE(args[3]);
    } else {
        PyMem_Free(deps);
        PyErr_SetString(PyExc_TypeError, "link: raw is the offset (an int) or the message (bytes)");
        return NULL;
    }
    int r = w_link(w, id, offset, msg, msg_len, info, deps, n, NULL);
    PyMem_Free(deps);
    if (r)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Window_nbytes(Window *w, PyObject *unused)
{
    size_t n = sizeof(Window) + (size_t)w->cap_recs * sizeof(Rec) + (size_t)w->cap_slots * 4 +
               (size_t)w->cap_edges * sizeof(Edge) + w->arena_cap;
    if (w->objs)
        n += (size_t)PyDict_GET_SIZE(w->objs) * 250;
    return PyLong_FromSize_t(n);
}

static int shrink(void **p, uint32_t *cap, uint32_t need, size_t item)
{
    if (*cap <= need)
        return 0;
    if (need == 0) {
        PyMem_Free(*p);
        *p = NULL;
        *cap = 0;
        return 0;
    }
    /* a fresh block, not a realloc: a block cut short leaves its tail as a hole few others fit */
    void *q = PyMem_Malloc((size_t)need * item);
    if (q != NULL) {
        memcpy(q, *p, (size_t)need * item);
        PyMem_Free(*p);
        *p = q;
        *cap = need;
    }
    return 0;
}

/* trim(): the arrays cut to what they hold (the feeder calls it at end of file) */
static PyObject *Window_trim(Window *w, PyObject *unused)
{
    if (w->arena_dead && w_compact(w))
        return NULL;
    shrink((void **)&w->recs, &w->cap_recs, w->n_recs, sizeof(Rec));
    shrink((void **)&w->arena, &w->arena_cap, w->arena_len, 1);
    if (!w->free_edge)
        shrink((void **)&w->edges, &w->cap_edges, w->n_edges, sizeof(Edge));
    Py_RETURN_NONE;
}

static PyMappingMethods Window_mapping = {(lenfunc)Window_len, (binaryfunc)Window_getitem, NULL};
static PySequenceMethods Window_sequence = {.sq_contains = (objobjproc)Window_contains};

static PyMethodDef Window_methods[] = {
    {"get", (PyCFunction)(void (*)(void))Window_get, METH_FASTCALL, "get(id[, default]): the record, or default"},
    {"info", (PyCFunction)Window_info, METH_O, "info(id) -> NodeInfo (KeyError if not loaded)"},
    {"link", (PyCFunction)(void (*)(void))Window_link, METH_FASTCALL,
     "link(id, deps, info, raw): a node the reference decoded, linked in (the caller checked it is new)"},
    {"nbytes", (PyCFunction)Window_nbytes, METH_NOARGS, "nbytes() -> the bytes the window holds"},
    {"taken", (PyCFunction)Window_taken, METH_O, "taken(id): the node is in flight (its state 2)"},
    {"trim", (PyCFunction)Window_trim, METH_NOARGS, "trim(): spare room given back"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WindowType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chakra_tools.core._hotloops.Window",
    .tp_basicsize = sizeof(Window),
    .tp_dealloc = (destructor)Window_dealloc,
    .tp_as_mapping = &Window_mapping,
    .tp_as_sequence = &Window_sequence,
    .tp_iter = (getiterfunc)Window_iter,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A feeder's window of loaded nodes as C records (see _hotloops.c).",
    .tp_methods = Window_methods,
    .tp_new = Window_new,
};

/* -- Record: a view of one loaded node, with the slots of feed/feeder.py's `_Loaded` ----------- */

static PyObject *Record_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *w, *key;
    uint64_t id;
    if (!PyArg_UnpackTuple(args, "Record", 2, 2, &w, &key))
        return NULL;
    if (!PyObject_TypeCheck(w, &WindowType) || !as_id(key, &id)) {
        PyErr_SetString(PyExc_TypeError, "Record(window, id)");
        return NULL;
    }
    Record *r = (Record *)type->tp_alloc(type, 0);
    if (r == NULL)
        return NULL;
    r->w = (Window *)Py_NewRef(w);
    r->id = id;
    return (PyObject *)r;
}

static void Record_dealloc(Record *r)
{
    Py_XDECREF(r->w);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

/* The record's index in its window, or -1 with KeyError set (finished since) */
static int64_t rec_index(Record *r)
{
    int64_t i = w_find(r->w, r->id, NULL);
    if (i < 0) {
        PyObject *x = PyLong_FromUnsignedLongLong(r->id);
        if (x) {
            PyErr_SetObject(PyExc_KeyError, x);
            Py_DECREF(x);
        }
    }
    return i;
}

static PyObject *Record_get(Record *self, void *which)
{
    int64_t i = rec_index(self);
    if (i < 0)
        return NULL;
    Window *w = self->w;
    Rec *r = &w->recs[i];
    switch ((int)(intptr_t)which) {
    case 0: { /* raw */
        Py_ssize_t n;
        Ptr m = rec_msg(w, r, &n);
        if (m)
            return PyBytes_FromStringAndSize((const char *)m, n);
        return PyLong_FromLongLong(rec_offset(w, r));
    }
    case 1: /* info: None in a lazy window until asked for, as the reference keeps it */
        if (r->hasobj || r->packed)
            return w_info(w, (uint32_t)i);
        Py_RETURN_NONE;
    case 2:
        return rec_deps(w, r);
    case 3:
        return PyLong_FromUnsignedLong(r->waiting);
    case 4: { /* children */
        if (!r->head)
            Py_RETURN_NONE;
        PyObject *l = PyList_New(0);
        for (uint32_t e = r->head; l && e; e = w->edges[e - 1].next) {
            PyObject *x = PyLong_FromUnsignedLongLong(RID(&w->recs[w->edges[e - 1].child]));
            if (x == NULL || PyList_Append(l, x) < 0)
                Py_CLEAR(l);
            Py_XDECREF(x);
        }
        if (l && PyList_Reverse(l) < 0) /* as added: the chain holds the latest first */
            Py_CLEAR(l);
        return l;
    }
    default:
        return PyLong_FromLong(r->state);
    }
}

static int Record_set(Record *self, PyObject *value, void *which)
{
    int64_t i = rec_index(self);
    if (i < 0)
        return -1;
    Rec *r = &self->w->recs[i];
    int k = (int)(intptr_t)which;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a record's fields cannot be deleted");
        return -1;
    }
    if (k == 1)
        return rec_keep(self->w, r, value == Py_None ? NULL : value) ? -1 : 0;
    long v = PyLong_AsLong(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (k == 3 && v >= 0 && v <= MAX_WAITING)
        r->waiting = (uint32_t)v;
    else if (k == 5 && v >= 0 && v <= 2)
        r->state = (uint8_t)v;
    else {
        PyErr_SetString(PyExc_ValueError, "waiting: a count; state: 0, 1 or 2");
        return -1;
    }
    return 0;
}

static PyGetSetDef Record_getset[] = {
    {"raw", (getter)Record_get, NULL, "the message, or where it lies in the file", (void *)0},
    {"info", (getter)Record_get, (setter)Record_set, "the NodeInfo (None: a lazy window's, not made yet)", (void *)1},
    {"deps", (getter)Record_get, NULL, "the dependencies resolved, as recorded", (void *)2},
    {"waiting", (getter)Record_get, (setter)Record_set, "how many dependencies it still waits for", (void *)3},
    {"children", (getter)Record_get, NULL, "the ids that wait for it, or None", (void *)4},
    {"state", (getter)Record_get, (setter)Record_set, "0 blocked, 1 issuable, 2 in flight", (void *)5},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RecordType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chakra_tools.core._hotloops.Record",
    .tp_basicsize = sizeof(Record),
    .tp_dealloc = (destructor)Record_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One loaded node of a Window, viewed with the slots of feed/feeder.py's _Loaded.",
    .tp_getset = Record_getset,
    .tp_new = Record_new,
};

/* ---- load_node, load_frames, finish_node: the feeder's window changed as the reference changes it
 *
 *     load_node(window, msg[, offset]) -> id | None
 *         (twin: hotloops._load_node_twin loads no node; ETFeeder._load_reference, the reference,
 *         does) the message parsed and linked into a Window as `_load_reference` links it. An
 *         eager window keeps the offset instead of the message where one is given. Returns None,
 *         having changed nothing, where decode_node would, and for an id (the node's or a
 *         dependency's) at or above bitmap_limit or one already loaded or finished: the reference
 *         loads those (and reports the repeated id).
 */
/* One message (p, n) into the window: 0, PUNT (nothing changed) or FAIL. */
static int load_one(Window *w, Ptr p, Py_ssize_t n, int64_t offset, uint64_t *id)
{
    Parsed d;
    if (parse(p, n, &w->sp, &d))
        return PUNT;
    if (d.id >= w->limit || bit_set(w->bits, d.id) || w_find(w, d.id, NULL) >= 0)
        return PUNT;
    for (int i = 0; i < d.n_deps; i++)
        if (d.deps[i] >= w->limit)
            return PUNT;
    *id = d.id;
    /* with the info kept, the record keeps where the message lies, not the message */
    int keep_msg = !w->eager || offset < 0;
    return w_link(w, d.id, w->eager ? offset : -1, keep_msg ? p : NULL, n, NULL, d.deps, d.n_deps,
                  w->eager ? &d : NULL);
}

static PyObject *load_node(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 3 || !PyObject_TypeCheck(args[0], &WindowType) || !PyBytes_Check(args[1]) ||
        (nargs == 3 && !PyLong_CheckExact(args[2])))
        Py_RETURN_NONE;
    int64_t offset = -1;
    if (nargs == 3 && ((offset = PyLong_AsLongLong(args[2])) < 0)) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    uint64_t id;
    int r = load_one((Window *)args[0], (Ptr)PyBytes_AS_STRING(args[1]), PyBytes_GET_SIZE(args[1]), offset, &id);
    if (r == FAIL)
        return NULL;
    if (r == PUNT)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(id);
}

/*     load_frames(window, buf, pos, base, budget) -> (pos, loaded)
 *         (twin: hotloops._load_frames_twin loads none; the feeder then takes each frame from its
 *         FrameReader and loads it with load_node or the reference) the length-prefixed messages
 *         of buf from pos on loaded as load_node loads each (offset: base + the frame's place in
 *         buf), at most `budget` of them; it stops, the frame untouched, at one it cannot take
 *         whole from buf (end of buf, a message cut by it, a zero or implausible length) and at
 *         one load_node would leave to the reference. pos: the first byte not consumed.
 */
static PyObject *load_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyObject_TypeCheck(args[0], &WindowType) || !PyBytes_Check(args[1]))
        return Py_BuildValue("(On)", nargs >= 3 ? args[2] : Py_None, (Py_ssize_t)0); /* loads none */
    Py_ssize_t pos = PyLong_AsSsize_t(args[2]), budget = PyLong_AsSsize_t(args[4]);
    long long base = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    Window *w = (Window *)args[0];
    Py_ssize_t n = 0;
    Ptr buf = (Ptr)PyBytes_AS_STRING(args[1]), end = buf + PyBytes_GET_SIZE(args[1]);
    while (n < budget && pos >= 0 && buf + pos < end) {
        Ptr q = buf + pos;
        uint64_t len, id;
        if (rd_varint(&q, end, &len) || len == 0 || len > (uint64_t)(end - q))
            break;
        int r = load_one(w, q, (Py_ssize_t)len, base + pos, &id);
        if (r == FAIL)
            return NULL;
        if (r == PUNT)
            break;
        pos = (q - buf) + (Py_ssize_t)len;
        n++;
    }
    return Py_BuildValue("(nn)", pos, n);
}

/*     finish_node(window, nid) -> freed | None
 *         (twin: hotloops._finish_node_twin finishes no node; ETFeeder._finish_record, the
 *         reference, does) an in-flight node out of the Window, its id marked finished (the bitmap
 *         grown as FinishedIds.add grows it, or the set of large ids), its children's counts
 *         lowered, those at zero and blocked made issuable (pushed on `ready`): the list of those,
 *         in the order of the children. None, having changed nothing, for a node not loaded or not
 *         in flight (the reference raises).
 */
static int mark_finished(Window *w, uint64_t id, PyObject *nid)
{
    if (id >= w->limit) { /* FinishedIds.add: its set of large ids */
        PyObject *r = PyObject_CallMethod(w->finished, "add", "O", nid);
        Py_XDECREF(r);
        return r == NULL ? FAIL : 0;
    }
    Py_ssize_t byte = (Py_ssize_t)(id >> 3), have = PyByteArray_GET_SIZE(w->bits);
    if (byte >= have) {
        Py_ssize_t more = byte + 1 - have > have ? byte + 1 - have : have; /* as FinishedIds.add */
        if (PyByteArray_Resize(w->bits, have + more) < 0)
            return FAIL;
        memset(PyByteArray_AS_STRING(w->bits) + have, 0, more);
    }
    ((unsigned char *)PyByteArray_AS_STRING(w->bits))[byte] |= (unsigned char)(1u << (id & 7));
    return 0;
}

static PyObject *finish_node(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t id;
    if (nargs != 2 || !PyObject_TypeCheck(args[0], &WindowType) || !as_id(args[1], &id))
        Py_RETURN_NONE;
    Window *w = (Window *)args[0];
    int64_t i = w_find(w, id, NULL);
    if (i < 0 || w->recs[i].state != 2)
        Py_RETURN_NONE;
    PyObject *freed = PyList_New(0);
    if (freed == NULL || mark_finished(w, id, args[1]) || w_finish(w, (uint32_t)i, freed)) {
        Py_XDECREF(freed);
        return NULL;
    }
    return freed;
}

static PyMethodDef methods[] = {
    {"encode_frames", encode_frames, METH_VARARGS,
     "encode_frames(nodes, start) -> (bytes, next): length-prefixed Node messages for\n"
     "nodes[start:next]; stops early at a node Python must encode (next == start then) or after\n"
     "about 4 MiB."},
    {"plain_run", plain_run, METH_VARARGS,
     "plain_run(nodes, start, first, count, contract, comm_types) -> how many nodes from start on\n"
     "the validator has nothing to say about (consecutive ids from first + count)."},
    {"node_parses", node_parses, METH_O,
     "node_parses(msg) -> whether the Node message reads as today's schema (False: ask the reference)."},
    {"scan_frames", (PyCFunction)(void (*)(void))scan_frames, METH_FASTCALL,
     "scan_frames(buf, pos, first, count, contract, pgs, sink, max_comm_type[, colls, kinds]) -> (pos, n, last): the\n"
     "frames from pos on whose nodes the validator has nothing to say about (their communication in sink)."},
    {"pattern_of", (PyCFunction)pattern_of, METH_O,
     "pattern_of(refs) -> (pattern, groups, ranks): shape_of's refs as the places of their first appearances."},
    {"metadata_fields", metadata_fields, METH_O,
     "metadata_fields(msg) -> (world_size, rank, conversion) of a GlobalMetadata message, or None\n"
     "(the reference decodes it)."},
    {"shape_of", (PyCFunction)(void (*)(void))shape_of, METH_FASTCALL,
     "shape_of(buf, pos) -> (a, b, refs) or None: the frames from pos on hashed but for the ranks and\n"
     "groups they name (pg_name, comm_src, comm_dst), which are listed in refs."},
    {"decode_node", (PyCFunction)(void (*)(void))decode_node, METH_FASTCALL,
     "decode_node(msg, use_data, use_ctrl, info_type, max_type, comm_coll) -> (id, deps, info) or\n"
     "None: one Node message read for the feeder without protobuf objects (None: the reference decodes it)."},
    {"load_node", (PyCFunction)(void (*)(void))load_node, METH_FASTCALL,
     "load_node(window, msg[, offset]) -> id or None: the node parsed and linked into a Window as\n"
     "ETFeeder._load_reference links it (None: nothing changed, the reference loads it)."},
    {"load_frames", (PyCFunction)(void (*)(void))load_frames, METH_FASTCALL,
     "load_frames(window, buf, pos, base, budget) -> (pos, loaded): the messages of buf from pos on\n"
     "loaded as load_node loads each, up to budget; stops at a frame it cannot take whole or must leave."},
    {"finish_node", (PyCFunction)(void (*)(void))finish_node, METH_FASTCALL,
     "finish_node(window, nid) -> the children freed, or None: an in-flight node finished in a Window\n"
     "as ETFeeder._finish_record finishes it (None: not in flight, nothing changed; the reference raises)."},
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
    if (PyType_Ready(&WindowType) < 0 || PyType_Ready(&RecordType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Window", (PyObject *)&WindowType) < 0 ||
        PyModule_AddObjectRef(m, "Record", (PyObject *)&RecordType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
