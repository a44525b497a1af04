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

typedef struct {
    uint64_t id, ids[2 * MAX_DEPS]; /* the id and the dependencies as numbers */
    int n_ids;
    PyObject *nid, *deps, *info;
} Decoded;

/* One Node message into *d (new references in d->nid, d->deps, d->info): 0, PUNT (nothing
 * set), or FAIL (a Python exception). */
static int decode(Ptr p, Py_ssize_t size, const Spec *sp, Decoded *d)
{
    Ptr end = p + size;
    int use_data = sp->use_data, use_ctrl = sp->use_ctrl;
    long max_type = sp->max_type, comm_coll = sp->comm_coll;

    uint64_t id = 0, start = 0, dur = 0, data[MAX_DEPS], ctrl[MAX_DEPS];
    int64_t type = 0;
    int n_data = 0, n_ctrl = 0, is_cpu = 0;
    Ptr name = (Ptr) "", pg = NULL, involved = NULL;
    Py_ssize_t name_len = 0, pg_len = 0, involved_len = 0;
    int slot_kind[N_SLOTS] = {0};
    uint64_t slot_v[N_SLOTS];

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
            if (f == 1) id = v;
            else if (f == 3) type = (int32_t)(uint32_t)v;
            else if (f == 6) start = v;
            else dur = v;
            break;
        case 2:
            if (w != 2 || !utf8_ok(s, n))
                return PUNT;
            name = s;
            name_len = n;
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
                    is_cpu = a.v != 0;
            } else if ((slot = int_slot(&a)) >= 0) {
                if (is_int_kind(a.kind)) {
                    slot_kind[slot] = a.kind;
                    slot_v[slot] = a.v;
                }
            } else if (name_is(&a, "pg_name", 7)) {
                if (a.kind == 29) {
                    pg = a.s;
                    pg_len = a.n;
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
    if (type < 0 || type > max_type)
        return PUNT;

    /* deps: data then control (as the feeder resolves them), each id once, first place kept */
    uint64_t *deps = d->ids;
    int n_deps = 0;
    for (int k = 0; k < 2; k++) {
        const uint64_t *ids = k == 0 ? data : ctrl;
        int count = k == 0 ? (use_data ? n_data : 0) : (use_ctrl ? n_ctrl : 0);
        for (int i = 0; i < count; i++) {
            int dup = 0;
            for (int j = 0; j < n_deps && !dup; j++)
                dup = deps[j] == ids[i];
            if (!dup)
                deps[n_deps++] = ids[i];
        }
    }

    /* the involved_dim values: a BoolList's field 1, packed or not */
    PyObject *items[18] = {NULL};
    PyObject *dep_tuple = NULL, *nid = NULL, *info = NULL;
    Py_ssize_t n_inv = 0;
    unsigned char inv[256];
    if (involved != NULL) {
        Ptr q = involved, qe = involved + involved_len;
        while (q < qe) {
            uint64_t v;
            if (next_field(&q, qe, &fd))
                return PUNT;
            if (fd.f != 1)
                continue;
            if (fd.w == 0) {
                if (n_inv >= 256)
                    return PUNT;
                inv[n_inv++] = fd.v != 0;
            } else { /* packed: check_list saw every other wire type off */
                Ptr r = fd.s, re = fd.s + fd.n;
                while (r < re) {
                    if (n_inv >= 256 || rd_varint(&r, re, &v))
                        return PUNT;
                    inv[n_inv++] = v != 0;
                }
            }
        }
    }

    dep_tuple = PyTuple_New(n_deps);
    if (dep_tuple == NULL)
        goto fail;
    for (int i = 0; i < n_deps; i++) {
        PyObject *d = PyLong_FromUnsignedLongLong(deps[i]);
        if (d == NULL)
            goto fail;
        PyTuple_SET_ITEM(dep_tuple, i, d);
    }
    nid = PyLong_FromUnsignedLongLong(id);
    items[0] = nid;
    Py_XINCREF(nid);
    items[1] = PyUnicode_DecodeUTF8((const char *)name, name_len, "strict");
    items[2] = PyLong_FromLongLong(type);
    items[3] = PyLong_FromUnsignedLongLong(dur);
    items[4] = PyBool_FromLong(is_cpu);
    for (int i = 0; i < N_SLOTS; i++) {
        /* NodeInfo's order: num_ops, tensor_size, comm_type, comm_size, comm_src, comm_dst, comm_tag
         * at 5..11; duration_ns, tid, stream at 15..17 */
        int at = i < 7 ? 5 + i : 8 + i;
        PyObject *val;
        if (slot_kind[i])
            val = int_value(slot_kind[i], slot_v[i]);
        else if (i == 0 || i == 1 || i == 3 || (i == 2 && type == comm_coll))
            val = PyLong_FromLong(0);  /* num_ops, tensor_size, comm_size: 0; a COMM_COLL's comm_type: 0 */
        else {
            val = Py_None;
            Py_INCREF(val);
        }
        items[at] = val;
    }
    items[12] = pg ? PyUnicode_DecodeUTF8((const char *)pg, pg_len, "strict") : PyUnicode_New(0, 0);
    if (involved != NULL) {
        items[13] = PyTuple_New(n_inv);
        if (items[13] != NULL)
            for (Py_ssize_t i = 0; i < n_inv; i++) {
                PyObject *b = inv[i] ? Py_True : Py_False;
                Py_INCREF(b);
                PyTuple_SET_ITEM(items[13], i, b);
            }
    } else {
        items[13] = Py_None;
        Py_INCREF(Py_None);
    }
    items[14] = PyLong_FromUnsignedLongLong(start);
    for (int i = 0; i < 18; i++)
        if (items[i] == NULL)
            goto fail;
    int items13_tracked = n_inv > 0;
    PyTypeObject *t = sp->info_type;
    info = t->tp_alloc(t, 18);
    if (info == NULL)
        goto fail;
    for (int i = 0; i < 18; i++) {
        PyTuple_SET_ITEM(info, i, items[i]);
        items[i] = NULL;
    }
    /* Nothing in them can refer back to a container: untracked now, the cyclic collector need not
     * walk a feeder's window of them again and again (as it untracks plain tuples of numbers) */
    PyObject_GC_UnTrack(info);
    if (items13_tracked)
        PyObject_GC_UnTrack(PyTuple_GET_ITEM(info, 13));
    if (n_deps)
        PyObject_GC_UnTrack(dep_tuple);
    d->id = id;
    d->n_ids = n_deps;
    d->nid = nid;
    d->deps = dep_tuple;
    d->info = info;
    return 0;
fail:
    for (int i = 0; i < 18; i++)
        Py_XDECREF(items[i]);
    Py_XDECREF(dep_tuple);
    Py_XDECREF(nid);
    Py_XDECREF(info);
    return FAIL;
}

static PyObject *decode_node(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyBytes_Check(args[0]) || !info_type_ok((PyTypeObject *)args[3]))
        Py_RETURN_NONE;
    Spec sp = {PyObject_IsTrue(args[1]), PyObject_IsTrue(args[2]), (PyTypeObject *)args[3],
               PyLong_AsLong(args[4]), PyLong_AsLong(args[5])};
    if (sp.use_data < 0 || sp.use_ctrl < 0 || PyErr_Occurred())
        return NULL;
    Decoded d;
    int r = decode((Ptr)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), &sp, &d);
    if (r == FAIL)
        return NULL;
    if (r == PUNT)
        Py_RETURN_NONE;
    PyObject *out = PyTuple_New(3);
    if (out == NULL) {
        Py_DECREF(d.nid);
        Py_DECREF(d.deps);
        Py_DECREF(d.info);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, d.nid);
    PyTuple_SET_ITEM(out, 1, d.deps);
    PyTuple_SET_ITEM(out, 2, d.info);
    return out;
}

/* ---- load_node: decode_node and the feeder's window bookkeeping (feed/feeder.py `_load`) -------
 *
 *     load_node(window, msg[, offset]) -> id | None
 *         (twin: hotloops._load_node_twin loads no node; ETFeeder._load, the reference, does)
 *         offset: where the message lies in the file; an eager window keeps it in the record's
 *         raw slot instead of the message (the info holds what a simulator reads).
 *         window = (loaded, finished bits, unseen, ready, heappush, record type, eager,
 *                   use_data, use_ctrl, info_type, max_type, comm_coll, bitmap_limit): the
 *         feeder's own containers, changed here as `_load` changes them: the node's record (its
 *         slots raw, info, deps, waiting, children, state) into `loaded`, linked to its loaded
 *         parents' children or to `unseen`, given the children that waited for it, pushed on
 *         `ready` if nothing holds it. Returns None, having changed nothing, where decode_node
 *         would, and for an id (the node's or a dependency's) at or above bitmap_limit or one
 *         already loaded or finished: the reference loads those.
 */
#include <structmember.h>

enum { R_RAW, R_INFO, R_DEPS, R_WAITING, R_CHILDREN, R_STATE, N_RECORD_SLOTS };
static const char *const RECORD_NAMES[N_RECORD_SLOTS] = {"raw", "info", "deps", "waiting", "children", "state"};
static PyTypeObject *record_type = NULL; /* the class record_off is for (a new reference) */
static Py_ssize_t record_off[N_RECORD_SLOTS];

#define RSLOT(obj, i) (*(PyObject **)((char *)(obj) + record_off[i]))

/* The record class's slot offsets, read once per class off its own member table (the one
 * __slots__ makes); 0, or PUNT if the class itself does not define each as a slot. */
static int record_slots(PyTypeObject *t)
{
    if (t == record_type)
        return 0;
    if (!PyType_Check(t) || t->tp_members == NULL)
        return PUNT;
    int found = 0;
    for (PyMemberDef *m = t->tp_members; m->name != NULL; m++)
        for (int i = 0; i < N_RECORD_SLOTS; i++)
            if (m->type == T_OBJECT_EX && strcmp(m->name, RECORD_NAMES[i]) == 0) {
                record_off[i] = m->offset;
                found |= 1 << i;
            }
    if (found != (1 << N_RECORD_SLOTS) - 1) {
        Py_CLEAR(record_type); /* record_off now mixes classes: no class may use it */
        return PUNT;
    }
    Py_XSETREF(record_type, (PyTypeObject *)Py_NewRef(t));
    return 0;
}

static inline void set_rslot(PyObject *rec, int i, PyObject *value) /* steals value */
{
    Py_XSETREF(RSLOT(rec, i), value);
}

static inline int finished_bit(PyObject *bits, uint64_t i)
{
    return (Py_ssize_t)(i >> 3) < PyByteArray_GET_SIZE(bits) &&
           (((unsigned char *)PyByteArray_AS_STRING(bits))[i >> 3] >> (i & 7) & 1);
}

/* nid appended to `lists[key]`, a new list if absent (dict.setdefault(key, []).append(nid)) */
static int append_to(PyObject *lists, PyObject *key, PyObject *nid)
{
    PyObject *l = PyDict_GetItemWithError(lists, key);
    if (l == NULL) {
        if (PyErr_Occurred() || (l = PyList_New(0)) == NULL)
            return FAIL;
        PyObject_GC_UnTrack(l); /* a list of ids: the cyclic collector need not walk it */
        int r = PyDict_SetItem(lists, key, l);
        Py_DECREF(l); /* the dict holds it */
        if (r < 0)
            return FAIL;
    }
    return PyList_Append(l, nid) < 0 ? FAIL : 0;
}

/* the record's children: nid added (the list is made for the first child) */
static int add_child(PyObject *rec, PyObject *nid)
{
    PyObject *ch = RSLOT(rec, R_CHILDREN);
    if (ch != NULL && PyList_Check(ch))
        return PyList_Append(ch, nid) < 0 ? FAIL : 0;
    if ((ch = PyList_New(1)) == NULL)
        return FAIL;
    PyObject_GC_UnTrack(ch); /* a list of ids */
    PyList_SET_ITEM(ch, 0, Py_NewRef(nid));
    set_rslot(rec, R_CHILDREN, ch);
    return 0;
}

/* raw: the record's raw slot (a new reference: the message, or where it lies in the file) */
static int link_node(PyObject *const *w, PyObject *raw, int eager, Decoded *d, PyObject *rec)
{
    PyObject *loaded = w[0], *bits = w[1], *unseen = w[2], *nid = d->nid;
    set_rslot(rec, R_RAW, raw);
    set_rslot(rec, R_INFO, Py_NewRef(eager ? d->info : Py_None));
    set_rslot(rec, R_DEPS, Py_NewRef(d->deps));
    set_rslot(rec, R_CHILDREN, Py_NewRef(Py_None));
    if (PyDict_SetItem(loaded, nid, rec) < 0)
        return FAIL;
    long waiting = 0;
    for (int i = 0; i < d->n_ids; i++) {
        PyObject *dep = PyTuple_GET_ITEM(d->deps, i);
        PyObject *parent = PyDict_GetItemWithError(loaded, dep);
        if (parent != NULL) {
            waiting++;
            if (add_child(parent, nid))
                return FAIL;
        } else if (PyErr_Occurred())
            return FAIL;
        else if (!finished_bit(bits, d->ids[i])) {
            waiting++;
            if (append_to(unseen, dep, nid))
                return FAIL;
        }
    }
    if (PyDict_GET_SIZE(unseen)) { /* the nodes read earlier that wait for this one */
        PyObject *waiters = PyDict_GetItemWithError(unseen, nid);
        if (waiters != NULL) {
            Py_INCREF(waiters);
            int r = PyDict_DelItem(unseen, nid);
            PyObject *ch = RSLOT(rec, R_CHILDREN);
            if (r == 0 && PyList_GET_SIZE(waiters)) {
                if (ch == Py_None) {
                    set_rslot(rec, R_CHILDREN, waiters);
                    waiters = NULL;
                } else
                    r = PyList_SetSlice(ch, PyList_GET_SIZE(ch), PyList_GET_SIZE(ch), waiters);
            }
            Py_XDECREF(waiters);
            if (r < 0)
                return FAIL;
        } else if (PyErr_Occurred())
            return FAIL;
    }
    PyObject *count = PyLong_FromLong(waiting);
    if (count == NULL)
        return FAIL;
    set_rslot(rec, R_WAITING, count);
    set_rslot(rec, R_STATE, PyLong_FromLong(waiting == 0)); /* 1 issuable, 0 blocked: small ints */
    if (waiting == 0) {
        PyObject *r = PyObject_CallFunctionObjArgs(w[4], w[3], nid, NULL); /* heappush(ready, nid) */
        if (r == NULL)
            return FAIL;
        Py_DECREF(r);
    }
    return 0;
}

/* What load_node and load_frames read off a window: 0 with *sp, *limit and *eager set; PUNT where
 * it is not a window this file knows (the reference loads then); FAIL. */
static int window_spec(PyObject *window, Spec *sp, uint64_t *limit, int *eager)
{
    if (!PyTuple_CheckExact(window) || PyTuple_GET_SIZE(window) != 13)
        return PUNT;
    PyObject *const *w = &PyTuple_GET_ITEM(window, 0);
    if (!PyDict_CheckExact(w[0]) || !PyByteArray_Check(w[1]) || !PyDict_CheckExact(w[2]) || !PyList_CheckExact(w[3]) ||
        !info_type_ok((PyTypeObject *)w[9]) || record_slots((PyTypeObject *)w[5]))
        return PUNT;
    Spec s = {PyObject_IsTrue(w[7]), PyObject_IsTrue(w[8]), (PyTypeObject *)w[9], PyLong_AsLong(w[10]),
              PyLong_AsLong(w[11])};
    *sp = s;
    *limit = PyLong_AsUnsignedLongLong(w[12]);
    *eager = PyObject_IsTrue(w[6]);
    if (sp->use_data < 0 || sp->use_ctrl < 0 || *eager < 0 || PyErr_Occurred())
        return FAIL;
    return 0;
}

/* One message (p, n) decoded and linked into the window: its id (a new reference), NULL with
 * *punt set where the reference must load it (nothing changed), NULL without it on an error.
 * msg: the message as bytes, or NULL (made here where the record keeps it); offset: where it
 * lies in the file, kept instead of the message by an eager window, or NULL. */
static PyObject *load_one(PyObject *const *w, const Spec *sp, uint64_t limit, int eager, Ptr p, Py_ssize_t n,
                          PyObject *msg, PyObject *offset, int *punt)
{
    Decoded d;
    *punt = 0;
    int r = decode(p, n, sp, &d);
    if (r == FAIL)
        return NULL;
    if (r == PUNT) {
        *punt = 1;
        return NULL;
    }
    int skip = d.id >= limit || finished_bit(w[1], d.id);
    for (int i = 0; i < d.n_ids && !skip; i++)
        skip = d.ids[i] >= limit;
    if (!skip && (skip = PyDict_Contains(w[0], d.nid)) < 0)
        r = FAIL;
    if (!skip && r == 0) {
        /* with the info kept, the record keeps where the message lies, not the message */
        PyObject *raw = eager && offset != NULL ? Py_NewRef(offset)
                        : msg != NULL ? Py_NewRef(msg) : PyBytes_FromStringAndSize((const char *)p, n);
        PyTypeObject *rtype = (PyTypeObject *)w[5];
        PyObject *rec = raw == NULL ? NULL : rtype->tp_alloc(rtype, 0);
        if (rec == NULL)
            Py_XDECREF(raw);
        r = rec == NULL || link_node(w, raw, eager, &d, rec) ? FAIL : 0;
        /* its slots hold numbers, bytes, NodeInfo, a tuple and a list of ids: no cycle can pass
         * through it, and a feeder's window of them (a replay holds one per rank) would otherwise
         * be walked by every full collection: most of the time of opening 1,024 rank files */
        if (r == 0 && PyObject_GC_IsTracked(rec))
            PyObject_GC_UnTrack(rec);
        Py_XDECREF(rec);
    }
    Py_DECREF(d.deps);
    Py_DECREF(d.info);
    if (r == 0 && !skip)
        return d.nid;
    Py_DECREF(d.nid);
    *punt = r == 0;
    return NULL;
}

static PyObject *load_node(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 3 || !PyBytes_Check(args[1]) || (nargs == 3 && !PyLong_CheckExact(args[2])))
        Py_RETURN_NONE;
    Spec sp;
    uint64_t limit;
    int eager, punt, r = window_spec(args[0], &sp, &limit, &eager);
    if (r == FAIL)
        return NULL;
    if (r == PUNT)
        Py_RETURN_NONE;
    PyObject *nid = load_one(&PyTuple_GET_ITEM(args[0], 0), &sp, limit, eager, (Ptr)PyBytes_AS_STRING(args[1]),
                             PyBytes_GET_SIZE(args[1]), args[1], nargs == 3 ? args[2] : NULL, &punt);
    if (nid == NULL && punt)
        Py_RETURN_NONE;
    return nid;
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
    if (nargs != 5 || !PyBytes_Check(args[1]))
        return Py_BuildValue("(nn)", (Py_ssize_t)0, (Py_ssize_t)0);
    Py_ssize_t pos = PyLong_AsSsize_t(args[2]), budget = PyLong_AsSsize_t(args[4]);
    long long base = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    Spec sp;
    uint64_t limit;
    int eager, r = window_spec(args[0], &sp, &limit, &eager);
    if (r == FAIL)
        return NULL;
    Py_ssize_t n = 0, start = pos;
    if (r == 0) {
        PyObject *const *w = &PyTuple_GET_ITEM(args[0], 0);
        Ptr buf = (Ptr)PyBytes_AS_STRING(args[1]), end = buf + PyBytes_GET_SIZE(args[1]);
        while (n < budget && pos >= 0 && buf + pos < end) {
            Ptr q = buf + pos;
            uint64_t len;
            if (rd_varint(&q, end, &len) || len == 0 || len > (uint64_t)(end - q))
                break;
            PyObject *offset = PyLong_FromLongLong(base + pos);
            if (offset == NULL)
                return NULL;
            int punt;
            PyObject *nid = load_one(w, &sp, limit, eager, q, (Py_ssize_t)len, NULL, offset, &punt);
            Py_DECREF(offset);
            if (nid == NULL) {
                if (punt)
                    break;
                return NULL;
            }
            Py_DECREF(nid);
            pos = (q - buf) + (Py_ssize_t)len;
            n++;
        }
    }
    return Py_BuildValue("(nn)", r == 0 ? pos : start, n);
}

/*     finish_node(window, nid) -> freed | None
 *         (twin: hotloops._finish_node_twin finishes no node; ETFeeder._finish_record, the
 *         reference, does) an in-flight node out of `loaded`, its bit set in the finished bitmap,
 *         its children's counts lowered, those at zero and blocked made issuable (pushed on
 *         `ready`): the list of those, in the order of the children. None, having changed
 *         nothing, for a node not loaded or not in flight (the reference raises) or whose bit lies
 *         past the bitmap's end or at or above bitmap_limit (the reference grows it or uses a set).
 */
static PyObject *finish_node(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_CheckExact(args[0]) || PyTuple_GET_SIZE(args[0]) != 13 || !PyLong_CheckExact(args[1]))
        Py_RETURN_NONE;
    PyObject *const *w = &PyTuple_GET_ITEM(args[0], 0);
    PyObject *loaded = w[0], *bits = w[1], *nid = args[1];
    if (!PyDict_CheckExact(loaded) || !PyByteArray_Check(bits) || record_slots((PyTypeObject *)w[5]))
        Py_RETURN_NONE;
    int overflow = 0;
    long long id = PyLong_AsLongLongAndOverflow(nid, &overflow);
    uint64_t limit = PyLong_AsUnsignedLongLong(w[12]);
    if (PyErr_Occurred())
        return NULL;
    if (overflow || id < 0 || (uint64_t)id >= limit || (id >> 3) >= PyByteArray_GET_SIZE(bits))
        Py_RETURN_NONE;
    PyObject *rec = PyDict_GetItemWithError(loaded, nid);
    if (rec == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (Py_TYPE(rec) != record_type || RSLOT(rec, R_STATE) == NULL || PyLong_AsLong(RSLOT(rec, R_STATE)) != 2) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_INCREF(rec);
    PyObject *freed = PyList_New(0);
    if (freed == NULL || PyDict_DelItem(loaded, nid) < 0)
        goto fail;
    ((unsigned char *)PyByteArray_AS_STRING(bits))[id >> 3] |= (unsigned char)(1u << (id & 7));
    PyObject *children = RSLOT(rec, R_CHILDREN);
    if (children != NULL && PyList_Check(children)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(children); i++) {
            PyObject *c = PyList_GET_ITEM(children, i);
            PyObject *child = PyDict_GetItemWithError(loaded, c);
            if (child == NULL) {
                if (!PyErr_Occurred())
                    PyErr_SetObject(PyExc_KeyError, c);
                goto fail;
            }
            long waiting = PyLong_AsLong(RSLOT(child, R_WAITING)) - 1;
            if (waiting == -2 && PyErr_Occurred())
                goto fail;
            PyObject *count = PyLong_FromLong(waiting);
            if (count == NULL)
                goto fail;
            set_rslot(child, R_WAITING, count);
            if (waiting == 0 && PyLong_AsLong(RSLOT(child, R_STATE)) == 0) {
                set_rslot(child, R_STATE, PyLong_FromLong(1));
                PyObject *r = PyObject_CallFunctionObjArgs(w[4], w[3], c, NULL); /* heappush(ready, c) */
                if (r == NULL || PyList_Append(freed, c) < 0) {
                    Py_XDECREF(r);
                    goto fail;
                }
                Py_DECREF(r);
            }
        }
    }
    Py_DECREF(rec);
    return freed;
fail:
    Py_DECREF(rec);
    Py_XDECREF(freed);
    return NULL;
}

static PyMethodDef methods[] = {
    {"encode_frames", encode_frames, METH_VARARGS,
     "encode_frames(nodes, start) -> (bytes, next): length-prefixed Node messages for\n"
     "nodes[start:next]; stops early at a node Python must encode (next == start then) or after\n"
     "about 4 MiB."},
    {"plain_run", plain_run, METH_VARARGS,
     "plain_run(nodes, start, first, count, contract, comm_types) -> how many nodes from start on\n"
     "the validator has nothing to say about (consecutive ids from first + count)."},
    {"decode_node", (PyCFunction)(void (*)(void))decode_node, METH_FASTCALL,
     "decode_node(msg, use_data, use_ctrl, info_type, max_type, comm_coll) -> (id, deps, info) or\n"
     "None: one Node message read for the feeder without protobuf objects (None: the reference decodes it)."},
    {"load_node", (PyCFunction)(void (*)(void))load_node, METH_FASTCALL,
     "load_node(window, msg[, offset]) -> id or None: decode_node, then the node into the feeder's window as\n"
     "ETFeeder._load puts it there (None: nothing changed, the reference loads it)."},
    {"load_frames", (PyCFunction)(void (*)(void))load_frames, METH_FASTCALL,
     "load_frames(window, buf, pos, base, budget) -> (pos, loaded): the messages of buf from pos on\n"
     "loaded as load_node loads each, up to budget; stops at a frame it cannot take whole or must leave."},
    {"finish_node", (PyCFunction)(void (*)(void))finish_node, METH_FASTCALL,
     "finish_node(window, nid) -> the children freed, or None: an in-flight node finished in the feeder's\n"
     "window as ETFeeder._finish_record does (None: nothing changed, the reference does it)."},
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
