/* The compiled hot loops of a conversion; each has a Python twin that is the reference (the tests
 * compare them) and that runs where this file was not built. convert/hotloops.py picks one or
 * the other, once, and hands what a compiled function declines to its twin.
 *
 * Why C: after msgspec has parsed the files, a conversion was a handful of Python loops of a few
 * microseconds per node each. These are the largest of them that are plain data shuffling (the
 * decisions stay in Python):
 *
 *     host_ops(nodes, needs_args, typed_op, host_op_type, no_attrs, io_decode) -> list[HostOp]
 *         (hotloops.host_ops) msgspec's `_Node` structs -> HostOps. The Python loop spent most
 *         of its time decoding each node's attribute list (ten small objects) only to read
 *         `rf_id` and `tid`; here a small scanner reads those two from the list's raw JSON.
 *         `needs_args(name)` says what else is read: nothing (0), the inputs and outputs
 *         (1: decoded here by `io_decode`), or those and the attributes (2: the op goes to
 *         `typed_op(node, want)`, Python). So does any node this scanner finds unusual (an
 *         attribute value that is not an integer or null, an escaped name, nesting deeper than
 *         64); `typed_op` decodes it fully or raises the error the caller handles.
 *
 *     to_nodes(recs, with_durations, node_type, attr_type, kinds, cpu, to_node) -> list[Node]
 *         (hotloops.to_nodes) build records -> frozen Node tuples, for the records of compute
 *         nodes whose attributes are all of `kinds`; `to_node(rec, with_durations)` makes the
 *         others (communication nodes, which go through make_attrs).
 *
 *     mentions(raws, wanted) -> {(tid, sid): [op index, ...]}
 *         (hotloops.inputs_search) which ops' raw inputs mention `[tid,sid,` (or `[tid, sid,`) of
 *         the tensors collectives wrote: one pass over every op's inputs for all of them, where
 *         Python searches each call's window of 8,192 ops with bytes.find.
 *
 *     emit_host_ops(ops, i, special, kernels, op_event, costs, chain, op_node, recs, ...) -> int
 *         (hotloops.emit_plain_ops; build.Builder._emit_host) the records of the host ops that launched nothing, one
 *         after another from ops[i] until one is special (a call's member, process-group
 *         setup) or launched device work; returns where it stopped, for Python to go on.
 *
 *     device_events(trace_events, lanes, event_type), nest(host, runtime, parent, ...)
 *         (hotloops.device_events, hotloops.nest) msgspec's Kineto events -> Events in their lanes,
 *         then each host event's enclosing host event and children's time, and each runtime
 *         call's host event, by time containment per thread.
 *
 *     tensor_bytes(value) -> int | None
 *         (hotloops.tensor_bytes) the bytes of the tensors in a recorded value, for every costed
 *         op; None where Python must do it (a non-integer item size, an overflow).
 *
 * Objects are read and filled in through their slots (the member descriptors of __slots__ and
 * of msgspec Structs), which are looked up once per class.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define PUNT 1
#define MAX_DEPTH 64

typedef struct {
    const char *p, *end;
} Scan;

static inline void ws(Scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static inline int take(Scan *s, char c)
{
    ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 1;
    }
    return 0;
}

/* A string at s->p (the opening quote): its raw contents; *escaped when it holds a backslash.
 * Keys and short values are walked byte by byte; a long string (an op schema) is searched with
 * memchr. A quote after an odd run of backslashes is escaped, so the search goes on. */
static inline int string(Scan *s, const char **start, Py_ssize_t *len, int *escaped)
{
    ws(s);
    if (s->p >= s->end || *s->p != '"')
        return PUNT;
    const char *q = ++s->p, *close = q, *stop = s->end - q > 32 ? q + 32 : s->end;
    while (close < stop && *close != '"' && *close != '\\')
        close++;
    if (close < stop && *close == '"') {
        *escaped = 0;
    } else {
        for (;;) {
            close = memchr(close, '"', s->end - close);
            if (close == NULL)
                return PUNT;
            const char *b = close;
            while (b > q && b[-1] == '\\')
                b--;
            if ((close - b) % 2 == 0)
                break;
            close++;
        }
        *escaped = memchr(q, '\\', close - q) != NULL;
    }
    *start = q;
    *len = close - q;
    s->p = close + 1;
    return 0;
}

/* Skip one JSON value of any kind (checked only as far as finding where it ends). */
static int skip_value(Scan *s, int depth)
{
    const char *q;
    Py_ssize_t n;
    int esc;
    if (depth > MAX_DEPTH)
        return PUNT;
    ws(s);
    if (s->p >= s->end)
        return PUNT;
    char c = *s->p;
    if (c == '"')
        return string(s, &q, &n, &esc);
    if (c == '[' || c == '{') {
        char close = c == '[' ? ']' : '}';
        s->p++;
        if (take(s, close))
            return 0;
        do {
            if (c == '{' && (string(s, &q, &n, &esc) || !take(s, ':')))
                return PUNT;
            if (skip_value(s, depth + 1))
                return PUNT;
        } while (take(s, ','));
        return take(s, close) ? 0 : PUNT;
    }
    const char *start = s->p; /* number or literal */
    while (s->p < s->end && ((*s->p >= '0' && *s->p <= '9') || (*s->p >= 'a' && *s->p <= 'z') ||
                             *s->p == '-' || *s->p == '+' || *s->p == '.' || *s->p == 'E'))
        s->p++;
    return s->p > start ? 0 : PUNT;
}

/* An attribute value as Python: an integer literal of at most 18 digits or null; anything else
 * is Python's to read (and check). */
static PyObject *int_or_none(const char *p, const char *end)
{
    if (p == NULL)
        Py_RETURN_NONE; /* no such attribute */
    if (end - p == 4 && memcmp(p, "null", 4) == 0)
        Py_RETURN_NONE;
    const char *q = p + (p < end && *p == '-');
    if (q >= end || end - p > 40)
        return NULL;
    for (const char *r = q; r < end; r++)
        if (*r < '0' || *r > '9')
            return NULL;
    if (*q == '0' && end - q > 1) /* JSON has no leading zeros */
        return NULL;
    if (end - q > 18) /* may not fit int64: Python's to check (convert/schema.py) */
        return NULL;
    long long v = 0;
    for (const char *r = q; r < end; r++)
        v = v * 10 + (*r - '0');
    return PyLong_FromLongLong(q > p ? -v : v);
}

typedef struct {
    const char *rf, *rf_end, *tid, *tid_end; /* value spans; NULL: absent */
} RfTid;

static int is_name(const char *q, Py_ssize_t n, const char *name)
{
    return (size_t)n == strlen(name) && memcmp(q, name, n) == 0;
}

/* `attrs`: [{"name": ..., "type": ..., "value": ...}, ...]. Where PyTorch puts them (first and
 * fifth attribute), rf_id and tid are taken from there and the rest is not read (msgspec has
 * checked it is JSON; the op schema strings after them are most of the bytes); else, as a dict
 * would, the last of each. */
static int scan_attrs(Scan *s, RfTid *out)
{
    const char *first_rf = NULL, *first_rf_end = NULL, *fifth_tid = NULL, *fifth_tid_end = NULL;
    int first_is_rf = 0, fifth_is_tid = 0;
    Py_ssize_t count = 0;
    memset(out, 0, sizeof *out);
    if (!take(s, '['))
        return PUNT;
    if (!take(s, ']')) {
        do {
            const char *name = "", *vp = NULL, *ve = NULL, *key;
            Py_ssize_t name_len = 0, key_len;
            int esc, seen_name = 0, seen_value = 0;
            if (!take(s, '{'))
                return PUNT;
            if (!take(s, '}')) {
                do {
                    if (string(s, &key, &key_len, &esc) || esc || !take(s, ':'))
                        return PUNT;
                    if (is_name(key, key_len, "name")) {
                        if (seen_name++ || string(s, &name, &name_len, &esc) || esc)
                            return PUNT;
                    } else if (is_name(key, key_len, "value")) {
                        if (seen_value++)
                            return PUNT;
                        ws(s);
                        vp = s->p;
                        if (skip_value(s, 1))
                            return PUNT;
                        ve = s->p;
                    } else if (skip_value(s, 1)) {
                        return PUNT;
                    }
                } while (take(s, ','));
                if (!take(s, '}'))
                    return PUNT;
            }
            int rf = is_name(name, name_len, "rf_id"), tid = is_name(name, name_len, "tid");
            static const char null[] = "null";
            if ((rf || tid) && vp == NULL)
                vp = null, ve = null + 4; /* a missing value is msgspec's default, None */
            if (rf)
                out->rf = vp, out->rf_end = ve;
            if (tid)
                out->tid = vp, out->tid_end = ve;
            if (count == 0 && rf)
                first_is_rf = 1, first_rf = vp, first_rf_end = ve;
            if (count == 4 && tid)
                fifth_is_tid = 1, fifth_tid = vp, fifth_tid_end = ve;
            count++;
            if (count == 5 && first_is_rf && fifth_is_tid)
                goto pytorch_layout; /* the rest cannot change the answer: left unread */
        } while (take(s, ','));
        if (!take(s, ']'))
            return PUNT;
    }
    ws(s);
    if (s->p != s->end)
        return PUNT;
pytorch_layout:
    if (count > 4 && first_is_rf && fifth_is_tid) {
        out->rf = first_rf, out->rf_end = first_rf_end;
        out->tid = fifth_tid, out->tid_end = fifth_tid_end;
    }
    return 0;
}

/* Objects are read and filled in through their slots' offsets (the member descriptors that
 * __slots__ and msgspec's Structs define): no attribute lookups in the loop. */
typedef struct {
    PyTypeObject *type; /* the class the offsets are for (a new reference) */
    int n;
    const char *const *names;
    Py_ssize_t off[16];
} Slots;

static int find_slots(Slots *sl, PyTypeObject *t)
{
    if (t == sl->type)
        return 0;
    Py_ssize_t off[16]; /* committed only when every name is a slot of t */
    for (int i = 0; i < sl->n; i++) {
        PyObject *d = PyObject_GetAttrString((PyObject *)t, sl->names[i]);
        PyErr_Clear();
        int ok = d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok)
            off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_XDECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError,
                         "%s.%s is not a slot (the compiled loops fill in known classes only)",
                         t->tp_name, sl->names[i]);
            return -1;
        }
    }
    memcpy(sl->off, off, sl->n * sizeof off[0]);
    Py_XSETREF(sl->type, (PyTypeObject *)Py_NewRef(t));
    return 0;
}

#define SLOT(sl, obj, i) (*(PyObject **)((char *)(obj) + (sl).off[i]))

/* HostOp's slots, in this order */
enum { O_ID, O_NAME, O_PARENT, O_TID, O_RF_ID, O_IN_VALUES, O_OUT_TYPES = O_IN_VALUES + 5, O_ATTRS,
       O_RAW_INPUTS, N_OP_SLOTS };
static const char *const OP_NAMES[N_OP_SLOTS] = {
    "id", "name", "parent", "tid", "rf_id", "in_values", "in_shapes", "in_types", "out_values",
    "out_shapes", "out_types", "attrs", "raw_inputs"};
static Slots OP = {NULL, N_OP_SLOTS, OP_NAMES, {0}};

/* the typed node's fields read here (hostet._Node) */
enum { N_ID, N_NAME, N_CTRL_DEPS, N_INPUTS, N_OUTPUTS, N_ATTRS, N_NODE_SLOTS };
static const char *const NODE_NAMES[N_NODE_SLOTS] = {"id", "name", "ctrl_deps", "inputs",
                                                     "outputs", "attrs"};
static Slots NODE = {NULL, N_NODE_SLOTS, NODE_NAMES, {0}};

static inline void set_slot(PyObject *op, int i, PyObject *value)
{
    SLOT(OP, op, i) = Py_NewRef(value); /* every slot of a new object is NULL */
}

/* The caller of a node: `ctrl_deps` as an int, the first of a list, else 0. */
static PyObject *parent_of(PyObject *deps)
{
    if (PyLong_CheckExact(deps))
        return Py_NewRef(deps);
    if (PyList_Check(deps) && PyList_GET_SIZE(deps) > 0)
        return Py_NewRef(PyList_GET_ITEM(deps, 0));
    return PyLong_FromLong(0);
}

/* io_decode(raw) -> hostet._IO: its values, shapes and types into the op's slots `first`.. */
enum { IO_VALUES, IO_SHAPES, IO_TYPES, N_IO_SLOTS };
static const char *const IO_NAMES[N_IO_SLOTS] = {"values", "shapes", "types"};
static Slots IO = {NULL, N_IO_SLOTS, IO_NAMES, {0}};

static int decoded_io(PyObject *op, int first, PyObject *io_decode, PyObject *raw)
{
    PyObject *io = PyObject_CallOneArg(io_decode, raw);
    if (io == NULL || find_slots(&IO, Py_TYPE(io)) < 0) {
        Py_XDECREF(io);
        return -1;
    }
    for (int i = 0; i < N_IO_SLOTS; i++) {
        PyObject *v = SLOT(IO, io, i);
        if (v == NULL) {
            Py_DECREF(io);
            return -1;
        }
        set_slot(op, first + i, v);
    }
    Py_DECREF(io);
    return 0;
}

/* A HostOp whose attributes are not kept: with its inputs and outputs decoded by io_decode, or
 * (io_decode NULL) left empty. NULL with no exception set: Python's to make. */
static PyObject *plain_op(PyObject *n, PyTypeObject *op_type, PyObject *no_attrs, PyObject *empty,
                          PyObject *io_decode)
{
    PyObject *raw = SLOT(NODE, n, N_ATTRS), *id = SLOT(NODE, n, N_ID),
             *deps = SLOT(NODE, n, N_CTRL_DEPS), *inputs = SLOT(NODE, n, N_INPUTS),
             *outputs = SLOT(NODE, n, N_OUTPUTS);
    if (raw == NULL || id == NULL || deps == NULL || inputs == NULL || outputs == NULL)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return NULL;
    }
    Scan s = {view.buf, (const char *)view.buf + view.len};
    RfTid at;
    PyObject *rf = NULL, *tid = NULL, *parent = NULL, *op = NULL;
    if (scan_attrs(&s, &at) == 0 && (rf = int_or_none(at.rf, at.rf_end)) != NULL &&
        (tid = int_or_none(at.tid, at.tid_end)) != NULL) {
        if (tid == Py_None || (PyLong_Check(tid) && !PyObject_IsTrue(tid)))
            Py_SETREF(tid, PyLong_FromLong(0)); /* `tid or 0` */
        parent = parent_of(deps);
        op = parent && tid ? op_type->tp_alloc(op_type, 0) : NULL;
        if (op != NULL) {
            set_slot(op, O_ID, id);
            set_slot(op, O_NAME, SLOT(NODE, n, N_NAME));
            set_slot(op, O_PARENT, parent);
            set_slot(op, O_TID, tid);
            set_slot(op, O_RF_ID, rf);
            set_slot(op, O_ATTRS, no_attrs);
            set_slot(op, O_RAW_INPUTS, inputs);
            if (io_decode == NULL) {
                for (int i = O_IN_VALUES; i <= O_OUT_TYPES; i++)
                    set_slot(op, i, empty);
            } else if (decoded_io(op, O_IN_VALUES, io_decode, inputs) < 0 ||
                       decoded_io(op, O_IN_VALUES + 3, io_decode, outputs) < 0) {
                Py_CLEAR(op); /* the slots set so far are released with it */
            }
        }
    }
    PyErr_Clear(); /* whatever failed above, Python makes this op and says why if it must */
    Py_XDECREF(rf);
    Py_XDECREF(tid);
    Py_XDECREF(parent);
    PyBuffer_Release(&view);
    return op;
}

static PyObject *host_ops(PyObject *self, PyObject *args)
{
    PyObject *nodes, *needs_args, *typed_op, *op_type, *no_attrs, *io_decode;
    if (!PyArg_ParseTuple(args, "O!OOO!O!O:host_ops", &PyList_Type, &nodes, &needs_args,
                          &typed_op, &PyType_Type, &op_type, &PyDict_Type, &no_attrs, &io_decode))
        return NULL;
    if (find_slots(&OP, (PyTypeObject *)op_type) < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(nodes);
    PyObject *out = PyList_New(n), *wanted = PyDict_New(), *empty = PyTuple_New(0);
    if (out == NULL || wanted == NULL || empty == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *node = PyList_GET_ITEM(nodes, i), *op = NULL, *name;
        if (find_slots(&NODE, Py_TYPE(node)) < 0)
            goto fail;
        if ((name = SLOT(NODE, node, N_NAME)) == NULL) {
            PyErr_SetString(PyExc_TypeError, "host_ops: a node without a name");
            goto fail;
        }
        PyObject *want = PyDict_GetItemWithError(wanted, name); /* borrowed */
        if (want == NULL) {
            if (PyErr_Occurred() || (want = PyObject_CallOneArg(needs_args, name)) == NULL ||
                PyDict_SetItem(wanted, name, want) < 0) {
                Py_XDECREF(want);
                goto fail;
            }
            Py_DECREF(want); /* the dict holds it */
        }
        /* 0 / False: nothing decoded; 1 / True (hostet.INPUTS): inputs and outputs; more
         * (hostet.ALL): attributes too, which only Python's typed_op keeps */
        long level = PyLong_Check(want) ? PyLong_AsLong(want) : PyObject_IsTrue(want) ? 2 : 0;
        if (level == -1 && PyErr_Occurred())
            goto fail;
        if (level == 0 || level == 1)
            op = plain_op(node, (PyTypeObject *)op_type, no_attrs, empty,
                          level == 1 ? io_decode : NULL);
        if (op == NULL && (op = PyObject_CallFunctionObjArgs(typed_op, node, want, NULL)) == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, op);
    }
    Py_DECREF(wanted);
    Py_DECREF(empty);
    return out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(wanted);
    Py_XDECREF(empty);
    return NULL;
}

/* -- to_nodes ------------------------------------------------------------------------------ */

enum { R_ID, R_NAME, R_TYPE, R_DEPS, R_TS, R_DUR, R_ATTRS, R_CALL, R_TID, R_STREAM, N_REC_SLOTS };
static const char *const REC_NAMES[N_REC_SLOTS] = {"id", "name", "type", "deps", "ts",
                                                   "dur_us", "attrs", "call", "tid", "stream"};
static Slots REC = {NULL, N_REC_SLOTS, REC_NAMES, {0}};
static PyObject *S_duration_ns, *S_is_cpu_op, *S_empty;

#define EXACT 4503599627370496.0 /* 2**52: floats below it keep whole numbers and halves exact */

/* graphcheck.micros: whole microseconds, at least 1 for a positive duration; -1: Python's to do */
static long long micros(PyObject *us)
{
    double d;
    if (PyFloat_CheckExact(us))
        d = PyFloat_AS_DOUBLE(us);
    else if (PyLong_CheckExact(us)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(us, &overflow);
        if (overflow || v >= (1LL << 52) || v <= -(1LL << 52))
            return -1;
        d = (double)v;
    } else
        return -1;
    if (!(d < EXACT)) /* also NaN */
        return -1;
    if (d <= 0)
        return 0;
    long long m = (long long)(d + 0.5);
    return m > 1 ? m : 1;
}

/* A tuple subclass instance (Node, Attr) of n items, each given (its reference is stolen). */
static PyObject *record(PyTypeObject *t, Py_ssize_t n, PyObject **items)
{
    PyObject *o = t->tp_alloc(t, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (o == NULL || items[i] == NULL) {
            for (Py_ssize_t j = i; j < n; j++)
                Py_XDECREF(items[j]);
            Py_XDECREF(o);
            return NULL;
        }
        PyTuple_SET_ITEM(o, i, items[i]);
    }
    return o;
}

/* The attributes of a compute record as Attrs, or NULL with no exception: Python's to build. */
static PyObject *compute_attrs(PyObject *attrs, PyObject *kinds, PyObject *cpu, PyTypeObject *attr)
{
    PyObject *built = PyDict_New(), *k, *v;
    Py_ssize_t pos = 0;
    while (built != NULL && PyDict_Next(attrs, &pos, &k, &v)) {
        PyObject *kind = PyUnicode_CheckExact(k) ? PyDict_GetItemWithError(kinds, k) : NULL, *a;
        if (kind == NULL)
            goto punt;
        if (PyUnicode_Compare(k, S_is_cpu_op) == 0) {
            a = PyDict_GetItemWithError(cpu, v); /* borrowed; an unhashable value: Python's */
            if (a == NULL)
                goto punt;
            Py_INCREF(a);
        } else {
            PyObject *items[3] = {Py_NewRef(kind), Py_NewRef(v), Py_NewRef(S_empty)};
            if ((a = record(attr, 3, items)) == NULL)
                goto punt;
        }
        int rc = PyDict_SetItem(built, k, a);
        Py_DECREF(a);
        if (rc < 0)
            goto punt;
    }
    return built;
punt:
    PyErr_Clear();
    Py_XDECREF(built);
    return NULL;
}

/* One compute record's Node, or NULL with no exception set: Python's to make. */
static PyObject *compute_node(PyObject *r, int with_durations, PyTypeObject *node_type,
                              PyTypeObject *attr_type, PyObject *kinds, PyObject *cpu)
{
    PyObject *attrs = SLOT(REC, r, R_ATTRS), *dur = SLOT(REC, r, R_DUR), *ts = SLOT(REC, r, R_TS),
             *deps = SLOT(REC, r, R_DEPS), *call = SLOT(REC, r, R_CALL);
    if (call != Py_None || attrs == NULL || !PyDict_CheckExact(attrs) || dur == NULL ||
        ts == NULL || deps == NULL || SLOT(REC, r, R_ID) == NULL || SLOT(REC, r, R_NAME) == NULL ||
        SLOT(REC, r, R_TYPE) == NULL)
        return NULL;
    long long m = micros(dur), start;
    if (m < 0)
        return NULL;
    if (PyFloat_CheckExact(ts)) {
        double t = PyFloat_AS_DOUBLE(ts);
        if (!(t < 9.2e18)) /* NaN or past int64: Python's */
            return NULL;
        start = t > 0 ? (long long)t : 0;
    } else if (PyLong_CheckExact(ts)) {
        int overflow;
        start = PyLong_AsLongLongAndOverflow(ts, &overflow);
        if (overflow)
            return NULL;
        if (start < 0)
            start = 0;
    } else
        return NULL;
    if (with_durations && PyFloat_CheckExact(dur)) { /* a fraction of a microsecond: keep ns */
        double d = PyFloat_AS_DOUBLE(dur);
        if (d > 0 && d != trunc(d)) {
            if (!(d * 1000 < EXACT))
                return NULL;
            PyObject *ns = PyLong_FromDouble(nearbyint(d * 1000)); /* round(): half to even */
            int rc = ns ? PyDict_SetItem(attrs, S_duration_ns, ns) : -1;
            Py_XDECREF(ns);
            if (rc < 0) {
                PyErr_Clear();
                return NULL;
            }
        }
    }
    PyObject *built = compute_attrs(attrs, kinds, cpu, attr_type);
    if (built == NULL)
        return NULL;
    PyObject *items[10] = {
        Py_NewRef(SLOT(REC, r, R_ID)), Py_NewRef(SLOT(REC, r, R_NAME)),
        Py_NewRef(SLOT(REC, r, R_TYPE)), PySequence_Tuple(deps), PyTuple_New(0),
        PyLong_FromLongLong(start), PyLong_FromLongLong(m), built, Py_NewRef(Py_None),
        Py_NewRef(Py_None)};
    PyObject *node = record(node_type, 10, items);
    if (node == NULL)
        PyErr_Clear();
    return node;
}

static PyObject *to_nodes(PyObject *self, PyObject *args)
{
    PyObject *recs, *node_type, *attr_type, *kinds, *cpu, *to_node;
    int with_durations;
    if (!PyArg_ParseTuple(args, "O!pO!O!O!O!O:to_nodes", &PyList_Type, &recs, &with_durations,
                          &PyType_Type, &node_type, &PyType_Type, &attr_type, &PyDict_Type, &kinds,
                          &PyDict_Type, &cpu, &to_node))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)node_type, &PyTuple_Type) ||
        !PyType_IsSubtype((PyTypeObject *)attr_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "to_nodes: node_type and attr_type must be named tuples");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(recs);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(recs, i), *node;
        if (find_slots(&REC, Py_TYPE(r)) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        node = compute_node(r, with_durations, (PyTypeObject *)node_type,
                            (PyTypeObject *)attr_type, kinds, cpu);
        if (node == NULL &&
            (node = PyObject_CallFunctionObjArgs(to_node, r, with_durations ? Py_True : Py_False,
                                                 NULL)) == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, node);
    }
    return out;
}

/* -- emit_host_ops ------------------------------------------------------------------------ */

enum { E_TS, E_DUR, E_CHILD_US, N_EVENT_SLOTS };
static const char *const EVENT_NAMES[N_EVENT_SLOTS] = {"ts", "dur", "child_us"};
static Slots EVENT = {NULL, N_EVENT_SLOTS, EVENT_NAMES, {0}};
static PyObject *S_num_ops, *S_tensor_size, *S_tid, *F_ZERO;

/* Builder._emit_host's record of one host op that launched nothing; NULL with no exception set:
 * Python's to emit. */
static PyObject *host_rec(PyObject *op, PyObject *rid, PyObject *op_event, PyObject *costs,
                          PyObject *chain, PyTypeObject *rec_type, PyObject *comp)
{
    PyObject *oid = SLOT(OP, op, O_ID), *tid = SLOT(OP, op, O_TID), *name = SLOT(OP, op, O_NAME);
    if (oid == NULL || tid == NULL || name == NULL)
        return NULL;
    PyObject *ev = PyDict_GetItemWithError(op_event, oid), *ts = F_ZERO, *dur = NULL;
    PyObject *cost = PyDict_GetItemWithError(costs, oid), *prev = NULL;
    if (PyErr_Occurred() || (cost != NULL && (!PyTuple_Check(cost) || PyTuple_GET_SIZE(cost) != 2)))
        goto punt;
    if (ev != NULL) { /* the exclusive time: max(dur - child_us, 0.0) */
        if (find_slots(&EVENT, Py_TYPE(ev)) < 0)
            goto punt;
        PyObject *d = SLOT(EVENT, ev, E_DUR), *c = SLOT(EVENT, ev, E_CHILD_US);
        ts = SLOT(EVENT, ev, E_TS);
        if (ts == NULL || d == NULL || c == NULL || !PyFloat_CheckExact(d) || !PyFloat_CheckExact(c))
            goto punt;
        double x = PyFloat_AS_DOUBLE(d) - PyFloat_AS_DOUBLE(c);
        dur = 0.0 > x ? Py_NewRef(F_ZERO) : PyFloat_FromDouble(x);
    } else {
        dur = Py_NewRef(F_ZERO);
    }
    prev = PyDict_GetItemWithError(chain, tid);
    if (PyErr_Occurred())
        goto punt;
    PyObject *deps = prev != NULL ? PyList_New(1) : PyList_New(0), *attrs = PyDict_New();
    PyObject *rec = rec_type->tp_alloc(rec_type, 0);
    if (deps == NULL || attrs == NULL || rec == NULL || dur == NULL ||
        PyDict_SetItem(attrs, S_is_cpu_op, Py_True) < 0 ||
        (PyLong_CheckExact(tid) && PyDict_SetItem(attrs, S_tid, tid) < 0) ||
        (cost != NULL && (PyDict_SetItem(attrs, S_num_ops, PyTuple_GET_ITEM(cost, 0)) < 0 ||
                          PyDict_SetItem(attrs, S_tensor_size, PyTuple_GET_ITEM(cost, 1)) < 0))) {
        Py_XDECREF(deps);
        Py_XDECREF(attrs);
        Py_XDECREF(rec);
        goto punt;
    }
    if (prev != NULL)
        PyList_SET_ITEM(deps, 0, Py_NewRef(prev));
    PyObject *fields[N_REC_SLOTS] = {rid, name, comp, deps, ts, dur, attrs, Py_None, tid, Py_None};
    for (int i = 0; i < N_REC_SLOTS; i++)
        SLOT(REC, rec, i) = Py_NewRef(fields[i]);
    Py_DECREF(deps);
    Py_DECREF(attrs);
    Py_DECREF(dur);
    return rec;
punt:
    PyErr_Clear();
    Py_XDECREF(dur);
    return NULL;
}

static PyObject *emit_host_ops(PyObject *self, PyObject *args)
{
    PyObject *ops, *special, *kernels, *op_event, *costs, *chain, *op_node, *recs, *rec_type, *comp;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "O!nOO!O!O!O!O!O!O!O:emit_host_ops", &PyList_Type, &ops, &i,
                          &special, &PyDict_Type, &kernels, &PyDict_Type, &op_event, &PyDict_Type,
                          &costs, &PyDict_Type, &chain, &PyDict_Type, &op_node, &PyList_Type,
                          &recs, &PyType_Type, &rec_type, &comp))
        return NULL;
    if (!PyAnySet_Check(special)) {
        PyErr_SetString(PyExc_TypeError, "emit_host_ops: special must be a set");
        return NULL;
    }
    if (find_slots(&REC, (PyTypeObject *)rec_type) < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ops);
    for (; i < n; i++) {
        PyObject *op = PyList_GET_ITEM(ops, i), *oid;
        if (find_slots(&OP, Py_TYPE(op)) < 0 || (oid = SLOT(OP, op, O_ID)) == NULL)
            break;
        int sp = PySet_Contains(special, oid);
        PyObject *k = sp == 0 ? PyDict_GetItemWithError(kernels, oid) : NULL;
        if (sp != 0 || (k != NULL && PyObject_IsTrue(k) != 0) || PyErr_Occurred())
            break; /* a call's member, setup, an op that launched work: Python emits it */
        PyObject *rid = PyLong_FromSsize_t(PyList_GET_SIZE(recs) + 1);
        PyObject *rec = rid ? host_rec(op, rid, op_event, costs, chain, (PyTypeObject *)rec_type,
                                       comp) : NULL;
        int bad = rec == NULL || PyList_Append(recs, rec) < 0;
        if (!bad) /* chain[tid] = op_node[oid] = rid */
            bad = PyDict_SetItem(chain, SLOT(OP, op, O_TID), rid) < 0 ||
                  PyDict_SetItem(op_node, oid, rid) < 0;
        Py_XDECREF(rid);
        Py_XDECREF(rec);
        if (bad) {
            if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError))
                PyErr_Clear();
            if (PyErr_Occurred())
                return NULL;
            break;
        }
    }
    PyErr_Clear();
    return PyLong_FromSsize_t(i);
}

/* -- device_events, nest ------------------------------------------------------------------ */

enum { V_PH, V_CAT, V_NAME, V_TID, V_TS, V_DUR, V_ARGS, N_RAW_SLOTS };
static const char *const RAW_NAMES[N_RAW_SLOTS] = {"ph", "cat", "name", "tid", "ts", "dur", "args"};
static Slots RAW = {NULL, N_RAW_SLOTS, RAW_NAMES, {0}};
enum { A_RF_ID, A_CORRELATION, A_STREAM, A_BYTES, N_ARG_SLOTS };
static const char *const ARG_NAMES[N_ARG_SLOTS] = {"rf_id", "correlation", "stream", "bytes"};
static Slots ARGS = {NULL, N_ARG_SLOTS, ARG_NAMES, {0}};
enum { D_IDX, D_NAME, D_CAT, D_TID, D_TS, D_DUR, D_ARGS, D_PARENT, D_CHILD_US, N_DEV_SLOTS };
static const char *const DEV_NAMES[N_DEV_SLOTS] = {"idx", "name", "cat", "tid", "ts",
                                                   "dur", "args", "parent", "child_us"};
static Slots DEV = {NULL, N_DEV_SLOTS, DEV_NAMES, {0}};
static PyObject *S_X, *S_nccl, *S_rpc, *S_rf_key, *S_correlation, *S_stream, *S_bytes, *I_MINUS_ONE;

/* kineto._host_args / _runtime_args / _gpu_args: the args keys an event keeps */
static PyObject *key_args(PyObject *a, long lane)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    static const int host[] = {A_RF_ID}, runtime[] = {A_CORRELATION},
                     gpu[] = {A_CORRELATION, A_STREAM, A_BYTES};
    PyObject *const names[N_ARG_SLOTS] = {S_rf_key, S_correlation, S_stream, S_bytes};
    const int *which = lane == 0 ? host : lane == 1 ? runtime : gpu;
    int n = lane == 0 || lane == 1 ? 1 : 3;
    for (int i = 0; i < n; i++) {
        PyObject *v = SLOT(ARGS, a, which[i]);
        if (v != NULL && v != Py_None && PyDict_SetItem(d, names[which[i]], v) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}

static PyObject *device_events(PyObject *self, PyObject *args)
{
    PyObject *events, *lanes, *event_type;
    if (!PyArg_ParseTuple(args, "O!O!O!:device_events", &PyList_Type, &events, &PyDict_Type, &lanes,
                          &PyType_Type, &event_type))
        return NULL;
    if (find_slots(&DEV, (PyTypeObject *)event_type) < 0)
        return NULL;
    PyObject *whole_at = PyList_New(0);
    if (whole_at == NULL)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(events);
    for (Py_ssize_t pos = 0; pos < n; pos++) {
        PyObject *e = PyList_GET_ITEM(events, pos);
        if (find_slots(&RAW, Py_TYPE(e)) < 0)
            goto fail;
        PyObject *ph = SLOT(RAW, e, V_PH), *cat = SLOT(RAW, e, V_CAT), *name = SLOT(RAW, e, V_NAME);
        if (ph == NULL || cat == NULL || name == NULL || !PyUnicode_Check(ph) ||
            !PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "device_events: an event without ph, cat or name");
            goto fail;
        }
        if (PyUnicode_Compare(ph, S_X) != 0)
            continue;
        PyObject *lane = PyDict_GetItemWithError(lanes, cat); /* (list, kind, whole) */
        if (lane == NULL) {
            if (PyErr_Occurred())
                goto fail;
            continue;
        }
        PyObject *list = PyTuple_GET_ITEM(lane, 0);
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(lane, 1));
        int whole = PyObject_IsTrue(PyTuple_GET_ITEM(lane, 2));
        PyObject *dur = SLOT(RAW, e, V_DUR), *raw_args = SLOT(RAW, e, V_ARGS);
        if (dur == NULL || raw_args == NULL || SLOT(RAW, e, V_TID) == NULL || SLOT(RAW, e, V_TS) == NULL)
            goto fail;
        int truthy = PyObject_IsTrue(dur); /* `e.dur or 0.0` */
        if (truthy < 0)
            goto fail;
        /* NCCL events and record_param_comms keep their whole args: the collective metadata */
        int nccl = PyUnicode_Tailmatch(name, S_nccl, 0, PY_SSIZE_T_MAX, -1)
                   || PyUnicode_Compare(name, S_rpc) == 0;
        PyObject *ev_args;
        if (whole || nccl) { /* its whole args, decoded afterwards; its position meanwhile */
            ev_args = PyLong_FromSsize_t(pos);
            if (ev_args == NULL || PyList_Append(whole_at, ev_args) < 0) {
                Py_XDECREF(ev_args);
                goto fail;
            }
        } else {
            if (find_slots(&ARGS, Py_TYPE(raw_args)) < 0 || (ev_args = key_args(raw_args, kind)) == NULL)
                goto fail;
        }
        PyObject *idx = PyLong_FromSsize_t(PyList_GET_SIZE(list));
        PyObject *ev = ((PyTypeObject *)event_type)->tp_alloc((PyTypeObject *)event_type, 0);
        if (idx == NULL || ev == NULL) {
            Py_XDECREF(idx);
            Py_XDECREF(ev);
            Py_DECREF(ev_args);
            goto fail;
        }
        PyObject *fields[N_DEV_SLOTS] = {idx, name, cat, SLOT(RAW, e, V_TID), SLOT(RAW, e, V_TS),
                                         truthy ? dur : F_ZERO, ev_args, I_MINUS_ONE, F_ZERO};
        for (int i = 0; i < N_DEV_SLOTS; i++)
            SLOT(DEV, ev, i) = Py_NewRef(fields[i]);
        Py_DECREF(idx);
        Py_DECREF(ev_args);
        int rc = PyList_Append(list, ev);
        Py_DECREF(ev);
        if (rc < 0)
            goto fail;
    }
    return whole_at;
fail:
    Py_DECREF(whole_at);
    return NULL;
}

/* One event in a thread's time line: host events (kind 0) and runtime calls (kind 1) sorted as
 * the tuples (ts, -dur, kind, idx) sort. */
typedef struct {
    double ts, neg_dur;
    long kind;
    Py_ssize_t idx;
} Item;

static int item_cmp(const void *pa, const void *pb)
{
    const Item *a = pa, *b = pb;
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    if (a->neg_dur != b->neg_dur)
        return a->neg_dur < b->neg_dur ? -1 : 1;
    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int event_times(PyObject *ev, double *ts, double *dur)
{
    PyObject *t = SLOT(DEV, ev, D_TS), *d = SLOT(DEV, ev, D_DUR);
    if (t == NULL || d == NULL || !PyFloat_CheckExact(t) || !PyFloat_CheckExact(d))
        return -1;
    *ts = PyFloat_AS_DOUBLE(t);
    *dur = PyFloat_AS_DOUBLE(d);
    return isnan(*ts) || isnan(*dur) ? -1 : 0;
}

/* kineto._nest: each host event's parent and children's time, each runtime call's host event.
 * Returns False (nothing changed) where an event's times are not plain floats: Python's then. */
static PyObject *nest(PyObject *self, PyObject *args)
{
    PyObject *host, *runtime, *runtime_parent, *event_type;
    double eps;
    if (!PyArg_ParseTuple(args, "O!O!O!O!d:nest", &PyList_Type, &host, &PyList_Type, &runtime,
                          &PyDict_Type, &runtime_parent, &PyType_Type, &event_type, &eps))
        return NULL;
    if (find_slots(&DEV, (PyTypeObject *)event_type) < 0)
        return NULL;
    Py_ssize_t nh = PyList_GET_SIZE(host), nr = PyList_GET_SIZE(runtime), total = nh + nr;
    Item *items = PyMem_Malloc((total + 1) * sizeof(Item));
    Py_ssize_t *group = PyMem_Malloc((total + 1) * sizeof(Py_ssize_t));
    PyObject *tids = PyDict_New(); /* tid -> group number */
    Py_ssize_t *stack = PyMem_Malloc((nh + 1) * sizeof(Py_ssize_t));
    double *ends = PyMem_Malloc((nh + 1) * sizeof(double));
    PyObject *result = NULL;
    if (items == NULL || group == NULL || tids == NULL || stack == NULL || ends == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < total; k++) { /* every event, with the group of its thread */
        PyObject *ev = k < nh ? PyList_GET_ITEM(host, k) : PyList_GET_ITEM(runtime, k - nh);
        if (Py_TYPE(ev) != (PyTypeObject *)event_type || SLOT(DEV, ev, D_TID) == NULL) {
            result = Py_NewRef(Py_False);
            goto done;
        }
        double ts, dur;
        PyObject *idx = SLOT(DEV, ev, D_IDX), *child = SLOT(DEV, ev, D_CHILD_US);
        if (event_times(ev, &ts, &dur) < 0 || idx == NULL || !PyLong_CheckExact(idx) ||
            PyLong_AsSsize_t(idx) != (k < nh ? k : k - nh) || child == NULL ||
            !PyFloat_CheckExact(child) || SLOT(DEV, ev, D_PARENT) == NULL) {
            PyErr_Clear(); /* checked before anything changes: Python can start afresh */
            result = Py_NewRef(Py_False);
            goto done;
        }
        PyObject *g = PyDict_GetItemWithError(tids, SLOT(DEV, ev, D_TID));
        if (g == NULL) {
            if (PyErr_Occurred())
                goto done;
            PyObject *num = PyLong_FromSsize_t(PyDict_GET_SIZE(tids));
            if (num == NULL || PyDict_SetItem(tids, SLOT(DEV, ev, D_TID), num) < 0) {
                Py_XDECREF(num);
                goto done;
            }
            g = num;
            Py_DECREF(num);
        }
        group[k] = PyLong_AsSsize_t(g);
        items[k] = (Item){ts, -dur, k < nh ? 0 : 1, k < nh ? k : k - nh};
    }
    Py_ssize_t ngroups = PyDict_GET_SIZE(tids);
    Item *sorted = PyMem_Malloc((total + 1) * sizeof(Item));
    Py_ssize_t *start = PyMem_Calloc(ngroups + 1, sizeof(Py_ssize_t));
    if (sorted == NULL || start == NULL) {
        PyMem_Free(sorted);
        PyMem_Free(start);
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < total; k++) /* bucket by thread, then sort each bucket */
        start[group[k] + 1]++;
    for (Py_ssize_t g = 0; g < ngroups; g++)
        start[g + 1] += start[g];
    for (Py_ssize_t k = 0; k < total; k++)
        sorted[start[group[k]]++] = items[k];
    int ok = 1;
    for (Py_ssize_t g = 0, lo = 0; g < ngroups && ok; g++) {
        Py_ssize_t hi = start[g], depth = 0;
        qsort(sorted + lo, hi - lo, sizeof(Item), item_cmp);
        for (Py_ssize_t k = lo; k < hi && ok; k++) {
            Item *it = &sorted[k];
            double end = it->ts - it->neg_dur;
            while (depth && end > ends[depth - 1] && ok) {
                /* one that starts inside and ends after it: the part inside is not its own time */
                PyObject *left = PyList_GET_ITEM(host, stack[--depth]);
                double lts, ldur;
                if (it->kind == 0 && event_times(left, &lts, &ldur) == 0 && it->ts < lts + ldur) {
                    PyObject *child = PyFloat_FromDouble(PyFloat_AS_DOUBLE(SLOT(DEV, left, D_CHILD_US))
                                                         + ((lts + ldur) - it->ts));
                    ok = child != NULL;
                    if (ok)
                        Py_SETREF(SLOT(DEV, left, D_CHILD_US), child);
                }
            }
            if (!ok)
                break;
            if (it->kind == 1) {
                if (depth) {
                    PyObject *r = PyLong_FromSsize_t(it->idx),
                             *h = PyLong_FromSsize_t(stack[depth - 1]);
                    ok = r && h && PyDict_SetItem(runtime_parent, r, h) == 0;
                    Py_XDECREF(r);
                    Py_XDECREF(h);
                }
                continue;
            }
            PyObject *ev = PyList_GET_ITEM(host, it->idx);
            if (depth) { /* every child_us is a float: checked above, and made so here */
                PyObject *top = PyList_GET_ITEM(host, stack[depth - 1]);
                PyObject *parent = PyLong_FromSsize_t(stack[depth - 1]);
                PyObject *child = PyFloat_FromDouble(
                    PyFloat_AS_DOUBLE(SLOT(DEV, top, D_CHILD_US)) - it->neg_dur);
                ok = parent && child;
                if (ok) {
                    Py_SETREF(SLOT(DEV, ev, D_PARENT), parent);
                    Py_SETREF(SLOT(DEV, top, D_CHILD_US), child);
                } else {
                    Py_XDECREF(parent);
                    Py_XDECREF(child);
                }
            }
            stack[depth] = it->idx;
            ends[depth++] = end + eps;
        }
        lo = hi;
    }
    PyMem_Free(sorted);
    PyMem_Free(start);
    if (ok) /* else a Python exception (memory) is set */
        result = Py_NewRef(Py_True);
done:
    PyMem_Free(items);
    PyMem_Free(group);
    PyMem_Free(stack);
    PyMem_Free(ends);
    Py_XDECREF(tids);
    return result;
}

/* -- tensor_bytes ------------------------------------------------------------------------- */

/* tensors.tensor_bytes: numel x itemsize summed over the recorded tensors (lists of six: ints
 * then a device string) in a nested value. 0: done; 1: Python's (a product that is not of two
 * ints, an overflow, nesting deeper than 64). */
static int sum_tensor_bytes(PyObject *v, long long *total, int depth)
{
    if (!PyList_CheckExact(v))
        return 0;
    Py_ssize_t n = PyList_GET_SIZE(v);
    if (n == 6 && PyUnicode_CheckExact(PyList_GET_ITEM(v, 5)) &&
        PyLong_CheckExact(PyList_GET_ITEM(v, 3)) && PyLong_CheckExact(PyList_GET_ITEM(v, 0))) {
        PyObject *size = PyList_GET_ITEM(v, 4);
        if (!PyLong_CheckExact(size))
            return 1;
        int o1, o2;
        long long a = PyLong_AsLongLongAndOverflow(PyList_GET_ITEM(v, 3), &o1),
                  b = PyLong_AsLongLongAndOverflow(size, &o2), p;
        if (o1 || o2 || __builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(*total, p, total))
            return 1;
        return 0;
    }
    if (depth > 64)
        return 1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (sum_tensor_bytes(PyList_GET_ITEM(v, i), total, depth + 1))
            return 1;
    return 0;
}

static PyObject *tensor_bytes(PyObject *self, PyObject *v)
{
    long long total = 0;
    if (sum_tensor_bytes(v, &total, 0))
        Py_RETURN_NONE;
    return PyLong_FromLongLong(total);
}

/* -- mentions ----------------------------------------------------------------------------- */

/* The wanted (tensor id, storage id) pairs in an open-addressing table: the scan looks up every
 * `[int,int,` in the inputs, and there are about a million. */
typedef struct {
    long long a, b;
    PyObject *key; /* the tuple, for the result */
    int used;
} Slot;

typedef struct {
    Slot *slots;
    size_t mask;
} Table;

static inline size_t pair_hash(long long a, long long b)
{
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)b + 0x632BE59BD9B4E019ULL);
    return (size_t)(h ^ (h >> 29));
}

static Slot *table_find(Table *t, long long a, long long b)
{
    for (size_t i = pair_hash(a, b) & t->mask;; i = (i + 1) & t->mask) {
        Slot *s = &t->slots[i];
        if (!s->used || (s->a == a && s->b == b))
            return s;
    }
}

/* A decimal integer as `b"%d" % n` writes it (no leading zeros, no plus); NULL if none. */
static const char *decimal(const char *p, const char *end, long long *out)
{
    int neg = p < end && *p == '-';
    const char *q = p + neg, *r = q;
    long long v = 0;
    while (r < end && *r >= '0' && *r <= '9' && r - q < 18)
        v = v * 10 + (*r++ - '0');
    if (r == q || (r < end && *r >= '0' && *r <= '9') || (*q == '0' && r - q > 1) ||
        (neg && v == 0))
        return NULL;
    *out = neg ? -v : v;
    return r;
}

static PyObject *mentions(PyObject *self, PyObject *args)
{
    PyObject *raws, *wanted;
    if (!PyArg_ParseTuple(args, "O!O:mentions", &PyList_Type, &raws, &wanted))
        return NULL;
    if (!PyAnySet_Check(wanted)) {
        PyErr_SetString(PyExc_TypeError, "mentions: wanted must be a set of (int, int)");
        return NULL;
    }
    Table t = {NULL, 0};
    size_t cap = 16;
    while (cap < 2 * (size_t)PySet_GET_SIZE(wanted) + 16)
        cap *= 2;
    t.slots = PyMem_Calloc(cap, sizeof(Slot));
    t.mask = cap - 1;
    PyObject *out = PyDict_New(), *it = NULL, *key;
    if (t.slots == NULL || out == NULL)
        goto fail;
    it = PyObject_GetIter(wanted);
    while (it != NULL && (key = PyIter_Next(it)) != NULL) {
        long long a, b;
        int ok = PyTuple_Check(key) && PyTuple_GET_SIZE(key) == 2 &&
                 PyLong_Check(PyTuple_GET_ITEM(key, 0)) && PyLong_Check(PyTuple_GET_ITEM(key, 1));
        if (ok) {
            a = PyLong_AsLongLong(PyTuple_GET_ITEM(key, 0));
            b = PyLong_AsLongLong(PyTuple_GET_ITEM(key, 1));
            ok = !PyErr_Occurred() && a > -(1LL << 59) && a < (1LL << 59) && b > -(1LL << 59) &&
                 b < (1LL << 59);
        }
        if (!ok) { /* not a pair of 64-bit ints: Python's search handles it */
            Py_DECREF(key);
            PyErr_Clear();
            for (size_t i = 0; i < cap; i++)
                Py_XDECREF(t.slots[i].key);
            PyMem_Free(t.slots);
            Py_DECREF(it);
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        Slot *s = table_find(&t, a, b);
        if (!s->used) {
            s->used = 1, s->a = a, s->b = b, s->key = key; /* the table keeps the reference */
        } else {
            Py_DECREF(key);
        }
    }
    if (it == NULL || PyErr_Occurred())
        goto fail;
    Py_ssize_t n = PyList_GET_SIZE(raws);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PyList_GET_ITEM(raws, i), &view, PyBUF_SIMPLE) < 0)
            goto fail;
        const char *p = view.buf, *end = p + view.len;
        PyObject *last = NULL; /* the key last recorded for this op: each op once per key */
        while ((p = memchr(p, '[', end - p)) != NULL) {
            long long a, b;
            const char *q = decimal(p + 1, end, &a);
            p++;
            if (q == NULL || q >= end || *q != ',')
                continue;
            q += 1 + (q + 1 < end && q[1] == ' ');
            q = decimal(q, end, &b);
            if (q == NULL || q >= end || *q != ',')
                continue;
            Slot *s = table_find(&t, a, b);
            if (!s->used || s->key == last)
                continue;
            last = s->key;
            PyObject *at = PyDict_GetItemWithError(out, s->key), *idx;
            if (at == NULL) {
                if (PyErr_Occurred() || (at = PyList_New(0)) == NULL ||
                    PyDict_SetItem(out, s->key, at) < 0) {
                    Py_XDECREF(at);
                    PyBuffer_Release(&view);
                    goto fail;
                }
                Py_DECREF(at); /* the dict holds it */
            }
            Py_ssize_t len = PyList_GET_SIZE(at);
            if (len && PyLong_AsSsize_t(PyList_GET_ITEM(at, len - 1)) == i)
                continue; /* this op is already listed for this key */
            if ((idx = PyLong_FromSsize_t(i)) == NULL || PyList_Append(at, idx) < 0) {
                Py_XDECREF(idx);
                PyBuffer_Release(&view);
                goto fail;
            }
            Py_DECREF(idx);
        }
        PyBuffer_Release(&view);
    }
    for (size_t i = 0; i < cap; i++)
        Py_XDECREF(t.slots[i].key);
    PyMem_Free(t.slots);
    Py_DECREF(it);
    return out;
fail:
    if (t.slots != NULL)
        for (size_t i = 0; i < cap; i++)
            Py_XDECREF(t.slots[i].key);
    PyMem_Free(t.slots);
    Py_XDECREF(it);
    Py_XDECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"host_ops", host_ops, METH_VARARGS,
     "host_ops(nodes, needs_args, typed_op, host_op_type, no_attrs, io_decode) -> list of HostOp,\n"
     "one per node; what this code does not make, typed_op(node, want) does."},
    {"emit_host_ops", emit_host_ops, METH_VARARGS,
     "emit_host_ops(ops, i, special, kernels, op_event, costs, chain, op_node, recs, rec_type,\n"
     "comp) -> the index of the first op from i on it did not emit (Builder._emit_host's)."},
    {"device_events", device_events, METH_VARARGS,
     "device_events(trace_events, lanes, event_type) -> positions of the events whose whole\n"
     "args are to be decoded; appends an Event to lanes[cat][0] for each complete event."},
    {"nest", nest, METH_VARARGS,
     "nest(host, runtime, runtime_parent, event_type, eps) -> True, or False (nothing done)\n"
     "where an event's times are not plain floats."},
    {"tensor_bytes", tensor_bytes, METH_O,
     "tensor_bytes(value) -> total bytes of the recorded tensors in it, or None: Python's."},
    {"mentions", mentions, METH_VARARGS,
     "mentions(raws, wanted) -> {(tid, sid): [index, ...]}: the indices of the raw inputs that\n"
     "hold `[tid,sid,` or `[tid, sid,` of a wanted pair, ascending; None if a wanted key is not\n"
     "a pair of integers below 2**59."},
    {"to_nodes", to_nodes, METH_VARARGS,
     "to_nodes(recs, with_durations, node_type, attr_type, kinds, cpu, to_node) -> list of Node;\n"
     "what this code does not make, to_node(rec, with_durations) does."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hotloops",
    "Compiled hot loops of a conversion (convert/hotloops.py picks them or their Python twins, "
    "the reference).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__hotloops(void)
{
    S_duration_ns = PyUnicode_InternFromString("duration_ns");
    S_is_cpu_op = PyUnicode_InternFromString("is_cpu_op");
    S_tid = PyUnicode_InternFromString("tid");
    S_empty = PyUnicode_FromString("");
    S_num_ops = PyUnicode_InternFromString("num_ops");
    S_tensor_size = PyUnicode_InternFromString("tensor_size");
    F_ZERO = PyFloat_FromDouble(0.0);
    S_X = PyUnicode_InternFromString("X");
    S_nccl = PyUnicode_InternFromString("nccl");
    S_rpc = PyUnicode_InternFromString("record_param_comms");
    S_rf_key = PyUnicode_InternFromString("Record function id");
    S_correlation = PyUnicode_InternFromString("correlation");
    S_stream = PyUnicode_InternFromString("stream");
    S_bytes = PyUnicode_InternFromString("bytes");
    I_MINUS_ONE = PyLong_FromLong(-1);
    if (S_X == NULL || S_nccl == NULL || S_rpc == NULL || S_rf_key == NULL || S_correlation == NULL ||
        S_stream == NULL || S_bytes == NULL || I_MINUS_ONE == NULL)
        return NULL;
    if (S_duration_ns == NULL || S_is_cpu_op == NULL || S_tid == NULL || S_empty == NULL || S_num_ops == NULL ||
        S_tensor_size == NULL || F_ZERO == NULL)
        return NULL;
    return PyModule_Create(&module);
}
