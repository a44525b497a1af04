/* The replayer's event loop in C: engine.Replayer's kernel (its heap, the ranks' lanes, dependency
 * release, the collectives' rendezvous and the events' columns), event for event as the Python
 * kernel in engine.py runs it: the same starts in the same order, the same heap entries pushed in
 * the same order, so ties resolve alike and both give the same result to the ns and the event id
 * (tests/replay/test_kernel.py runs both on the same inputs and compares every event).
 *
 * What stays in Python is what is pluggable or rare, called from here with the engine's own
 * methods: the feeders (`next_issuable`, `has_issuable`, `info`, `finish`), the timing policy
 * (`compute_ns` per compute node; `engine._cost_collective` once a collective's members have all
 * arrived, which says how long each takes), the point-to-point and memory handlers
 * (`engine.on_send`, `on_recv`, `on_mem`), and every error (the engine's checks raise them with
 * the file and the node). Before calling any of those but the feeders and `compute_ns`, the kernel
 * sets `engine._now`; what they schedule comes back through `Kernel.at`, what they link through
 * `Kernel.set_pred`. The kernel and its engine hold each other: a collected type, which the engine
 * drops at the end of its run.
 *
 * Also here: `rank_stats`, each rank's figures of a replay's events (result.py's reference).
 *
 *     Kernel(engine, states, lanes, slots, record_names, rendezvous, comm_types[, heap, count])
 *         states: engine.RankState per rank, in the engine's order (a rank's feeder and caps);
 *         lanes: the event lane of (node type, is_cpu_op), as a list of 16 (type * 2 + cpu);
 *         slots: the resource of the same; rendezvous: the engine's dict (pg, k) -> members;
 *         comm_types: the collective kinds the engine takes; heap, count: the engine's heap list and
 *         counter where its timing policy runs its own events (congestion-aware): the loop then
 *         keeps its entries there, as engine.py does, for the policy's events to interleave with,
 *         and a collective goes to `engine._join`
 *     .issue(i)            rank i issues what it can (engine._issue)
 *     .begin(i, t)         rank i begins issuing at t
 *     .at(t, rank, nid)    (rank, nid) finishes at t
 *     .set_pred(ev, pred)
 *     .drain()             run the heap dry
 *     .scheduled()         entries on the heap
 *     .take(column)        the events' column as bytes (8 bytes an event, type and lane 1), in
 *                          event order, its storage freed; "name": the list of names (or None)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* NodeInfo's fields (feed/info.py) */
enum { F_ID = 0, F_NAME = 1, F_TYPE = 2, F_CPU = 4, F_COMM_TYPE = 7, F_PG = 12 };
enum { T_LOAD = 2, T_STORE = 3, T_COMP = 4, T_SEND = 5, T_RECV = 6, T_COLL = 7, NTYPES = 8 };
#define NLANES 6
#define OTHER_LANE 5

/* ---- a map of node id -> two integers (linear probing, deletion by backward shift) ------------- */

typedef struct {
    uint64_t *keys;
    int64_t *a, *b;
    uint8_t *used;
    size_t cap, n;
} Map;

static size_t hash64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static void map_free(Map *m)
{
    PyMem_Free(m->keys);
    PyMem_Free(m->a);
    PyMem_Free(m->b);
    PyMem_Free(m->used);
    memset(m, 0, sizeof *m);
}

static int map_put(Map *m, uint64_t k, int64_t a, int64_t b);

static int map_grow(Map *m)
{
    Map old = *m;
    size_t cap = old.cap ? old.cap * 2 : 16;
    m->keys = PyMem_Calloc(cap, sizeof(uint64_t));
    m->a = PyMem_Calloc(cap, sizeof(int64_t));
    m->b = PyMem_Calloc(cap, sizeof(int64_t));
    m->used = PyMem_Calloc(cap, 1);
    m->cap = cap;
    m->n = 0;
    if (!m->keys || !m->a || !m->b || !m->used) {
        map_free(m);
        *m = old;
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < old.cap; i++)
        if (old.used[i])
            map_put(m, old.keys[i], old.a[i], old.b[i]);
    map_free(&old);
    return 0;
}

static int map_put(Map *m, uint64_t k, int64_t a, int64_t b)
{
    if ((m->n + 1) * 4 > m->cap * 3 && map_grow(m) < 0)
        return -1;
    size_t mask = m->cap - 1, i = hash64(k) & mask;
    while (m->used[i] && m->keys[i] != k)
        i = (i + 1) & mask;
    if (!m->used[i]) {
        m->used[i] = 1;
        m->keys[i] = k;
        m->n++;
    }
    m->a[i] = a;
    m->b[i] = b;
    return 0;
}

/* 1 and the values if k was there (it is not any more), else 0 */
static int map_pop(Map *m, uint64_t k, int64_t *a, int64_t *b)
{
    if (!m->cap)
        return 0;
    size_t mask = m->cap - 1, i = hash64(k) & mask;
    while (m->used[i] && m->keys[i] != k)
        i = (i + 1) & mask;
    if (!m->used[i])
        return 0;
    *a = m->a[i];
    *b = m->b[i];
    m->used[i] = 0;
    m->n--;
    for (size_t j = (i + 1) & mask; m->used[j]; j = (j + 1) & mask) {
        size_t h = hash64(m->keys[j]) & mask;
        /* the entry at j stays unless its home lies cyclically outside (i, j] */
        int stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
        if (stays)
            continue;
        m->keys[i] = m->keys[j];
        m->a[i] = m->a[j];
        m->b[i] = m->b[j];
        m->used[i] = 1;
        m->used[j] = 0;
        i = j;
    }
    return 1;
}

/* ---- a min-heap of node ids (a lane's deferred nodes) ----------------------------------------- */

typedef struct {
    uint64_t *v;
    size_t n, cap;
} IdHeap;

static int idheap_push(IdHeap *h, uint64_t x)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 8;
        uint64_t *v = PyMem_Realloc(h->v, cap * sizeof *v);
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->v[p] <= x)
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
    return 0;
}

static uint64_t idheap_pop(IdHeap *h)
{
    uint64_t top = h->v[0], last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h->v[c + 1] < h->v[c])
            c++;
        if (last <= h->v[c])
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n)
        h->v[i] = last;
    return top;
}

/* ---- the event heap: (time, seq) ordered, as engine.py's (time_ns, seq, rank, nid) ------------- */

typedef struct {
    int64_t t;
    uint64_t seq;
    uint64_t nid;
    int32_t rank; /* an index into Kernel.ranks */
    int32_t begin; /* 1: the rank begins issuing (engine._BEGIN) */
} Entry;

static int entry_lt(const Entry *x, const Entry *y)
{
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

/* ---- the kernel ------------------------------------------------------------------------------- */

typedef struct {
    PyObject *state, *rank_obj; /* the engine's RankState; the rank as an int */
    int64_t rank;
    PyObject *next_issuable, *has_issuable, *info, *finish; /* its feeder's bound methods */
    PyObject *coll_seq; /* the RankState's dict pg -> collectives issued on it */
    int64_t caps[NLANES], busy[NLANES], lane_freed_by[NLANES];
    IdHeap deferred[NLANES];
    int64_t n_deferred;
    Map freed, live, seq; /* node -> (event, time) that freed it; (event, resource); (k, -) */
} Rank;

typedef struct {
    PyObject_HEAD
    Rank *ranks;
    Py_ssize_t n;
    PyObject *index_of; /* rank -> index */
    Entry *heap;
    size_t hn, hcap;
    uint64_t seq;
    int64_t now;
    int64_t *ev_rank, *ev_start, *ev_end, *ev_pred;
    uint64_t *ev_node;
    int8_t *ev_type, *ev_lane;
    size_t nev, evcap;
    PyObject *names; /* list, or NULL when events are not recorded */
    int8_t lane_of[NTYPES * 2], slot_of[NTYPES * 2];
    PyObject *engine, *compute_ns, *on_send, *on_recv, *on_mem, *cost_collective, *check_collective,
        *past_clock, *rendezvous, *comm_types, *cross;
    /* a policy that runs its own events (congestion-aware): the engine's heap list and counter,
     * which the policy pushes onto too, and its `_join` for the collectives; else NULL */
    PyObject *pyheap, *count, *join;
    PyObject *groups; /* pg -> (group, frozenset of its ranks) */
} Kernel;

static PyObject *s_now, *s_next_issuable, *s_has_issuable, *s_info, *s_finish, *s_feeder, *s_caps, *s_rank,
    *s_coll_seq;

/* The kernel holds its engine, which holds it (a cycle the collector breaks through these). */
#define KERNEL_OBJECTS(X)                                                                              \
    X(index_of) X(names) X(engine) X(compute_ns) X(on_send) X(on_recv) X(on_mem) X(cost_collective)   \
        X(check_collective) X(past_clock) X(rendezvous) X(comm_types) X(cross) X(pyheap) X(count)      \
            X(join) X(groups)
#define RANK_OBJECTS(X) X(state) X(rank_obj) X(next_issuable) X(has_issuable) X(info) X(finish) X(coll_seq)

static int Kernel_traverse(Kernel *self, visitproc visit, void *arg)
{
#define VISIT(f) Py_VISIT(self->f);
    KERNEL_OBJECTS(VISIT)
#undef VISIT
    for (Py_ssize_t i = 0; i < self->n; i++) {
        Rank *r = &self->ranks[i];
#define VISIT(f) Py_VISIT(r->f);
        RANK_OBJECTS(VISIT)
#undef VISIT
    }
    return 0;
}

static int Kernel_clear(Kernel *self)
{
#define CLEAR(f) Py_CLEAR(self->f);
    KERNEL_OBJECTS(CLEAR)
#undef CLEAR
    for (Py_ssize_t i = 0; i < self->n; i++) {
        Rank *r = &self->ranks[i];
#define CLEAR(f) Py_CLEAR(r->f);
        RANK_OBJECTS(CLEAR)
#undef CLEAR
    }
    return 0;
}

static void Kernel_dealloc(Kernel *self)
{
    PyObject_GC_UnTrack(self);
    Kernel_clear(self);
    for (Py_ssize_t i = 0; i < self->n; i++) {
        Rank *r = &self->ranks[i];
        for (int l = 0; l < NLANES; l++)
            PyMem_Free(r->deferred[l].v);
        map_free(&r->freed);
        map_free(&r->live);
        map_free(&r->seq);
    }
    PyMem_Free(self->ranks);
    PyMem_Free(self->heap);
    PyMem_Free(self->ev_rank);
    PyMem_Free(self->ev_start);
    PyMem_Free(self->ev_end);
    PyMem_Free(self->ev_pred);
    PyMem_Free(self->ev_node);
    PyMem_Free(self->ev_type);
    PyMem_Free(self->ev_lane);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int lane_table(PyObject *seq, int8_t *out)
{
    PyObject *fast = PySequence_Fast(seq, "a lane table is a sequence of 16 ints");
    if (fast == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != NTYPES * 2) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "a lane table has 16 entries (node type * 2 + is_cpu_op)");
        return -1;
    }
    for (int i = 0; i < NTYPES * 2; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        out[i] = (int8_t)v;
    }
    Py_DECREF(fast);
    return 0;
}

static int Kernel_init(Kernel *self, PyObject *args, PyObject *kw)
{
    PyObject *engine, *states, *lanes, *slots, *rendezvous, *comm_types, *pyheap = Py_None, *count = Py_None;
    int record_names;
    if (!PyArg_ParseTuple(args, "OOOOpO!O|OO", &engine, &states, &lanes, &slots, &record_names, &PyDict_Type,
                          &rendezvous, &comm_types, &pyheap, &count))
        return -1;
    if ((pyheap == Py_None) != (count == Py_None) || (pyheap != Py_None && !PyList_CheckExact(pyheap))) {
        PyErr_SetString(PyExc_TypeError, "a shared heap is a list with its counter");
        return -1;
    }
    if (pyheap != Py_None) {
        self->pyheap = Py_NewRef(pyheap);
        self->count = Py_NewRef(count);
        if ((self->join = PyObject_GetAttrString(engine, "_join")) == NULL)
            return -1;
    }
    if (self->ranks != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Kernel runs once");
        return -1;
    }
    if (lane_table(lanes, self->lane_of) < 0 || lane_table(slots, self->slot_of) < 0)
        return -1;
    PyObject *fast = PySequence_Fast(states, "states: a sequence of RankState");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    self->ranks = PyMem_Calloc(n ? n : 1, sizeof(Rank));
    self->index_of = PyDict_New();
    if (self->ranks == NULL || self->index_of == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    self->n = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        Rank *r = &self->ranks[i];
        PyObject *st = PySequence_Fast_GET_ITEM(fast, i), *feeder = NULL, *caps = NULL, *idx = NULL;
        Py_INCREF(st);
        r->state = st;
        r->rank_obj = PyObject_GetAttr(st, s_rank);
        feeder = PyObject_GetAttr(st, s_feeder);
        caps = PyObject_GetAttr(st, s_caps);
        r->coll_seq = PyObject_GetAttr(st, s_coll_seq);
        if (r->rank_obj == NULL || feeder == NULL || caps == NULL || r->coll_seq == NULL)
            goto fail;
        r->rank = PyLong_AsLongLong(r->rank_obj);
        if (r->rank == -1 && PyErr_Occurred())
            goto fail;
        r->next_issuable = PyObject_GetAttr(feeder, s_next_issuable);
        r->has_issuable = PyObject_GetAttr(feeder, s_has_issuable);
        r->info = PyObject_GetAttr(feeder, s_info);
        r->finish = PyObject_GetAttr(feeder, s_finish);
        if (!r->next_issuable || !r->has_issuable || !r->info || !r->finish)
            goto fail;
        if (PySequence_Size(caps) != NLANES) {
            PyErr_SetString(PyExc_ValueError, "a RankState's caps: one per lane kind (split lanes run in Python)");
            goto fail;
        }
        for (int l = 0; l < NLANES; l++) {
            PyObject *c = PySequence_GetItem(caps, l);
            r->caps[l] = c ? PyLong_AsLongLong(c) : -1;
            Py_XDECREF(c);
            if (r->caps[l] == -1 && PyErr_Occurred())
                goto fail;
            r->lane_freed_by[l] = -1;
        }
        idx = PyLong_FromSsize_t(i);
        if (idx == NULL || PyDict_SetItem(self->index_of, r->rank_obj, idx) < 0)
            goto fail;
        Py_DECREF(idx);
        Py_DECREF(feeder);
        Py_DECREF(caps);
        continue;
    fail:
        Py_XDECREF(idx);
        Py_XDECREF(feeder);
        Py_XDECREF(caps);
        Py_DECREF(fast);
        return -1;
    }
    Py_DECREF(fast);
    self->engine = Py_NewRef(engine);
    self->rendezvous = Py_NewRef(rendezvous);
    self->comm_types = Py_NewRef(comm_types);
    self->names = record_names ? PyList_New(0) : NULL;
    self->groups = PyDict_New();
    PyObject *timing = PyObject_GetAttrString(engine, "timing"), *comms = PyObject_GetAttrString(engine, "comms");
    self->compute_ns = timing ? PyObject_GetAttrString(timing, "compute_ns") : NULL;
    self->check_collective = comms ? PyObject_GetAttrString(comms, "group_of") : NULL; /* raises on bad input */
    Py_XDECREF(timing);
    Py_XDECREF(comms);
    self->on_send = PyObject_GetAttrString(engine, "on_send");
    self->on_recv = PyObject_GetAttrString(engine, "on_recv");
    self->on_mem = PyObject_GetAttrString(engine, "on_mem");
    self->cost_collective = PyObject_GetAttrString(engine, "_cost_collective");
    PyObject *result = PyObject_GetAttrString(engine, "result");
    self->cross = result ? PyObject_GetAttrString(result, "cross") : NULL; /* events whose pred is a peer */
    Py_XDECREF(result);
    self->past_clock = PyObject_GetAttrString(engine, "_past_clock");
    if ((record_names && self->names == NULL) || !self->groups || !self->compute_ns || !self->on_send
        || !self->on_recv || !self->on_mem || !self->cost_collective || !self->check_collective
        || !self->past_clock || !self->cross)
        return -1;
    return 0;
}

/* -- the heap ---------------------------------------------------------------------------------- */

/* The engine's heap list, kept here as heapq keeps it: its entries are (time, seq, ...) with seq
 * unique, so (time, seq) orders them as tuple comparison does; the policy's compiled phases push
 * with heapq itself and read the top. Entries move within the list without reference changes. */
static int shared_key(PyObject *e, long long *t, long long *seq)
{
    if (!PyTuple_CheckExact(e) || PyTuple_GET_SIZE(e) < 2) {
        PyErr_SetString(PyExc_TypeError, "a heap entry is (time, seq, ...)");
        return -1;
    }
    *t = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 0));
    *seq = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 1));
    return ((*t == -1 || *seq == -1) && PyErr_Occurred()) ? -1 : 0;
}

/* 1 where a orders before b, 0 where not, -1 on error */
static int shared_lt(PyObject *a, PyObject *b)
{
    long long ta, sa, tb, sb;
    if (shared_key(a, &ta, &sa) < 0 || shared_key(b, &tb, &sb) < 0)
        return -1;
    return ta < tb || (ta == tb && sa < sb);
}

static int shared_heappush(PyObject *heap, PyObject *entry)
{
    if (PyList_Append(heap, entry) < 0)
        return -1;
    PyObject **v = ((PyListObject *)heap)->ob_item;
    Py_ssize_t i = PyList_GET_SIZE(heap) - 1;
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        int lt = shared_lt(v[i], v[parent]);
        if (lt < 0)
            return -1;
        if (!lt)
            break;
        PyObject *x = v[i];
        v[i] = v[parent];
        v[parent] = x;
        i = parent;
    }
    return 0;
}

/* the smallest entry (a new reference), taken off */
static PyObject *shared_heappop(PyObject *heap)
{
    Py_ssize_t n = PyList_GET_SIZE(heap);
    PyObject **v = ((PyListObject *)heap)->ob_item;
    PyObject *top = v[0], *last = v[n - 1];
    Py_INCREF(top);
    Py_INCREF(last);
    if (PyList_SetSlice(heap, n - 1, n, NULL) < 0) { /* drops the list's reference to last */
        Py_DECREF(top);
        Py_DECREF(last);
        return NULL;
    }
    n--;
    if (n == 0) {
        Py_DECREF(last);
        return top;
    }
    v = ((PyListObject *)heap)->ob_item;
    Py_DECREF(v[0]); /* top: the reference we hold stays */
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n) {
            int lt = shared_lt(v[c + 1], v[c]);
            if (lt < 0)
                goto fail;
            c += lt;
        }
        int lt = shared_lt(v[c], last);
        if (lt < 0)
            goto fail;
        if (!lt)
            break;
        v[i] = v[c];
        i = c;
    }
    v[i] = last; /* the reference taken above */
    return top;
fail:
    v[i] = last; /* the heap is left valid as a list, if out of order */
    Py_DECREF(top);
    return NULL;
}

/* onto the engine's own heap, as engine.py pushes: (time, next(count), rank, nid or _BEGIN) */
static int push_shared(Kernel *self, int64_t t, Py_ssize_t rank, uint64_t nid, int begin)
{
    PyObject *seq = PyIter_Next(self->count);
    if (seq == NULL)
        return -1;
    PyObject *entry = begin ? Py_BuildValue("(LNOi)", (long long)t, seq, self->ranks[rank].rank_obj, -1)
                            : Py_BuildValue("(LNOK)", (long long)t, seq, self->ranks[rank].rank_obj,
                                            (unsigned long long)nid);
    if (entry == NULL)
        return -1;
    int rc = shared_heappush(self->pyheap, entry);
    Py_DECREF(entry);
    return rc;
}

static int push(Kernel *self, int64_t t, Py_ssize_t rank, uint64_t nid, int begin)
{
    if (self->pyheap != NULL)
        return push_shared(self, t, rank, nid, begin);
    if (self->hn == self->hcap) {
        size_t cap = self->hcap ? self->hcap * 2 : 1024;
        Entry *h = PyMem_Realloc(self->heap, cap * sizeof(Entry));
        if (h == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->heap = h;
        self->hcap = cap;
    }
    Entry e = {t, ++self->seq, nid, (int32_t)rank, begin};
    size_t i = self->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!entry_lt(&e, &self->heap[p]))
            break;
        self->heap[i] = self->heap[p];
        i = p;
    }
    self->heap[i] = e;
    return 0;
}

static Entry pop(Kernel *self)
{
    Entry top = self->heap[0], last = self->heap[--self->hn];
    size_t i = 0, n = self->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && entry_lt(&self->heap[c + 1], &self->heap[c]))
            c++;
        if (!entry_lt(&self->heap[c], &last))
            break;
        self->heap[i] = self->heap[c];
        i = c;
    }
    if (n)
        self->heap[i] = last;
    return top;
}

/* t = now + d, or the engine's error for a finish past the 64-bit clock */
static int push_after(Kernel *self, Py_ssize_t i, uint64_t nid, PyObject *d_obj)
{
    int overflow = 0;
    long long d = PyLong_AsLongLongAndOverflow(d_obj, &overflow);
    if (d == -1 && PyErr_Occurred())
        return -1;
    long long t;
    if (overflow || __builtin_add_overflow(self->now, d, &t)) {
        PyObject *now = PyLong_FromLongLong(self->now), *sum = now ? PyNumber_Add(now, d_obj) : NULL;
        PyObject *res = sum ? PyObject_CallFunction(self->past_clock, "OKO", self->ranks[i].rank_obj,
                                                    (unsigned long long)nid, sum) : NULL;
        Py_XDECREF(now);
        Py_XDECREF(sum);
        Py_XDECREF(res);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_OverflowError, "a finish past the replay's clock");
        return -1;
    }
    return push(self, t, i, nid, 0);
}

/* -- the events -------------------------------------------------------------------------------- */

static int64_t add_event(Kernel *self, Rank *r, uint64_t nid, PyObject *name, int type, int lane, int64_t pred)
{
    if (self->nev == self->evcap) {
        size_t cap = self->evcap ? self->evcap * 2 : 4096;
#define GROW(f, T)                                                                                      \
    do {                                                                                                \
        T *p = PyMem_Realloc(self->f, cap * sizeof(T));                                                 \
        if (p == NULL) {                                                                                \
            PyErr_NoMemory();                                                                           \
            return -1;                                                                                  \
        }                                                                                               \
        self->f = p;                                                                                    \
    } while (0)
        GROW(ev_rank, int64_t);
        GROW(ev_start, int64_t);
        GROW(ev_end, int64_t);
        GROW(ev_pred, int64_t);
        GROW(ev_node, uint64_t);
        GROW(ev_type, int8_t);
        GROW(ev_lane, int8_t);
#undef GROW
        self->evcap = cap;
    }
    if (self->names != NULL && PyList_Append(self->names, name) < 0)
        return -1;
    size_t ev = self->nev++;
    self->ev_rank[ev] = r->rank;
    self->ev_node[ev] = nid;
    self->ev_type[ev] = (int8_t)type;
    self->ev_lane[ev] = (int8_t)lane;
    self->ev_start[ev] = self->now;
    self->ev_end[ev] = -1;
    self->ev_pred[ev] = pred;
    return (int64_t)ev;
}

/* -- issue, start, finish (engine.Replayer's _issue, _start, _finish) ------------------------- */

static int node_type(PyObject *info, int *cpu)
{
    *cpu = 0;
    long t = PyLong_AsLong(PyTuple_GET_ITEM(info, F_TYPE));
    if (t == -1 && PyErr_Occurred())
        return -1;
    *cpu = PyObject_IsTrue(PyTuple_GET_ITEM(info, F_CPU));
    if (*cpu < 0)
        return -1;
    return (int)t;
}

static int key_of(int t, int cpu)
{
    return (t >= 0 && t < NTYPES) ? t * 2 + cpu : -1;
}

static int set_now(Kernel *self)
{
    PyObject *now = PyLong_FromLongLong(self->now);
    if (now == NULL)
        return -1;
    int rc = PyObject_SetAttr(self->engine, s_now, now);
    Py_DECREF(now);
    return rc;
}

static int call_handler(Kernel *self, PyObject *fn, Rank *r, uint64_t nid, PyObject *info, int64_t ev)
{
    if (set_now(self) < 0)
        return -1;
    PyObject *res = PyObject_CallFunction(fn, "OKOL", r->state, (unsigned long long)nid, info, (long long)ev);
    Py_XDECREF(res);
    return res ? 0 : -1;
}

static int index_arg(Kernel *self, PyObject *rank, Py_ssize_t *i)
{
    PyObject *idx = PyDict_GetItemWithError(self->index_of, rank);
    if (idx == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_KeyError, "rank %R is not in this replay", rank);
        return -1;
    }
    *i = PyLong_AsSsize_t(idx);
    return 0;
}

/* engine._start_collective: each member ends `ns[j]` from now, the last to arrive its pred */
static int start_members(Kernel *self, PyObject *members, PyObject *ns_seq)
{
    PyObject *ns = PySequence_Fast(ns_seq, "a collective's times: one per member");
    if (ns == NULL)
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(members), m = PySequence_Fast_GET_SIZE(ns);
    PyObject *last_obj = PyTuple_GET_ITEM(PyList_GET_ITEM(members, n - 1), 3);
    long long last = PyLong_AsLongLong(last_obj);
    int rc = -1;
    for (Py_ssize_t j = 0; j < n && j < m; j++) {
        PyObject *member = PyList_GET_ITEM(members, j), *ev_obj = PyTuple_GET_ITEM(member, 3);
        long long ev = PyLong_AsLongLong(ev_obj);
        if (ev == -1 && PyErr_Occurred())
            goto done;
        if (ev != last) {
            self->ev_pred[ev] = last;
            if (PySet_Add(self->cross, ev_obj) < 0)
                goto done;
        }
        Py_ssize_t i;
        uint64_t nid = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(member, 1));
        if ((nid == (uint64_t)-1 && PyErr_Occurred()) || index_arg(self, PyTuple_GET_ITEM(member, 0), &i) < 0
            || push_after(self, i, nid, PySequence_Fast_GET_ITEM(ns, j)) < 0)
            goto done;
    }
    rc = 0;
done:
    Py_DECREF(ns);
    return rc;
}

static int call_join(Kernel *self, Rank *r, uint64_t nid, PyObject *info, int64_t ev, int64_t k)
{
    if (set_now(self) < 0)
        return -1;
    PyObject *res = PyObject_CallFunction(self->join, "OKOLL", r->state, (unsigned long long)nid, info, (long long)ev,
                                          (long long)k);
    Py_XDECREF(res);
    return res ? 0 : -1;
}

/* engine.on_coll: the k-th call of a rank on a group meets the k-th of every other member */
static int on_coll(Kernel *self, Py_ssize_t i, uint64_t nid, PyObject *info, int64_t ev)
{
    Rank *r = &self->ranks[i];
    if (self->join != NULL) { /* the policy's collectives run as its own events: engine._join */
        int64_t k, unused;
        if (!map_pop(&r->seq, nid, &k, &unused)) {
            PyErr_Format(PyExc_RuntimeError, "rank %S: node %llu: a collective started that was never issued",
                         r->rank_obj, (unsigned long long)nid);
            return -1;
        }
        return call_join(self, r, nid, info, ev, k);
    }
    PyObject *pg = PyTuple_GET_ITEM(info, F_PG), *entry = NULL, *group;
    int ok = PySet_Contains(self->comm_types, PyTuple_GET_ITEM(info, F_COMM_TYPE));
    if (ok < 0)
        PyErr_Clear();
    if (ok == 1 && PyUnicode_CheckExact(pg)) {
        entry = PyDict_GetItemWithError(self->groups, pg); /* borrowed */
        if (entry == NULL && PyErr_Occurred())
            return -1;
        if (entry != NULL) {
            ok = PySet_Contains(PyTuple_GET_ITEM(entry, 1), r->rank_obj);
            if (ok < 0)
                return -1;
            if (!ok)
                entry = NULL;
        }
    }
    if (entry == NULL) { /* the first call on this group, or one the engine refuses (it raises) */
        PyObject *g = PyObject_CallFunction(self->check_collective, "OKO", r->state, (unsigned long long)nid, info);
        if (g == NULL)
            return -1;
        PyObject *members = PyFrozenSet_New(g);
        entry = members ? PyTuple_Pack(2, g, members) : NULL;
        Py_DECREF(g);
        Py_XDECREF(members);
        if (entry == NULL || PyDict_SetItem(self->groups, pg, entry) < 0) {
            Py_XDECREF(entry);
            return -1;
        }
        Py_DECREF(entry); /* the dict holds it */
    }
    group = PyTuple_GET_ITEM(entry, 0);
    int64_t k, unused;
    if (!map_pop(&r->seq, nid, &k, &unused)) {
        PyErr_Format(PyExc_RuntimeError, "rank %S: node %llu: a collective started that was never issued",
                     r->rank_obj, (unsigned long long)nid);
        return -1;
    }
    PyObject *key = Py_BuildValue("(OL)", pg, (long long)k);
    if (key == NULL)
        return -1;
    PyObject *waiting = PyDict_GetItemWithError(self->rendezvous, key); /* borrowed */
    if (waiting == NULL) {
        if (PyErr_Occurred() || (waiting = PyList_New(0)) == NULL) {
            Py_DECREF(key);
            return -1;
        }
        if (PyDict_SetItem(self->rendezvous, key, waiting) < 0) {
            Py_DECREF(key);
            Py_DECREF(waiting);
            return -1;
        }
        Py_DECREF(waiting);
    }
    PyObject *member = Py_BuildValue("(OKOLL)", r->rank_obj, (unsigned long long)nid, info, (long long)ev,
                                     (long long)self->now);
    if (member == NULL || PyList_Append(waiting, member) < 0) {
        Py_XDECREF(member);
        Py_DECREF(key);
        return -1;
    }
    Py_DECREF(member);
    if (PyList_GET_SIZE(waiting) != PyTuple_GET_SIZE(group)) {
        Py_DECREF(key);
        return 0;
    }
    Py_INCREF(waiting);
    int rc = PyDict_DelItem(self->rendezvous, key);
    Py_DECREF(key);
    if (rc < 0 || set_now(self) < 0) {
        Py_DECREF(waiting);
        return -1;
    }
    PyObject *ns = PyObject_CallFunctionObjArgs(self->cost_collective, waiting, group, NULL);
    rc = ns ? start_members(self, waiting, ns) : -1;
    Py_DECREF(waiting);
    Py_XDECREF(ns);
    return rc;
}

/* start (rank i, nid) on resource res; info: a new reference, or NULL to ask the feeder */
static int start(Kernel *self, Py_ssize_t i, uint64_t nid, int res, PyObject *info)
{
    Rank *r = &self->ranks[i];
    if (info == NULL) {
        info = PyObject_CallFunction(r->info, "K", (unsigned long long)nid);
        if (info == NULL)
            return -1;
    }
    int cpu, t = node_type(info, &cpu), rc = -1;
    if (t < 0 && PyErr_Occurred())
        goto done;
    int64_t pred = -1, ready_at = 0;
    map_pop(&r->freed, nid, &pred, &ready_at);
    if (self->now > ready_at && r->lane_freed_by[res] >= 0)
        pred = r->lane_freed_by[res];
    int key = key_of(t, cpu);
    int64_t ev = add_event(self, r, nid, PyTuple_GET_ITEM(info, F_NAME), t, key < 0 ? OTHER_LANE : self->lane_of[key],
                           pred);
    if (ev < 0 || map_put(&r->live, nid, ev, res) < 0)
        goto done;
    switch (t) {
    case T_COMP: {
        PyObject *d = PyObject_CallFunction(self->compute_ns, "OKO", r->rank_obj, (unsigned long long)nid, info);
        if (d == NULL)
            goto done;
        rc = push_after(self, i, nid, d);
        Py_DECREF(d);
        break;
    }
    case T_COLL:
        rc = on_coll(self, i, nid, info, ev);
        break;
    case T_SEND:
        rc = call_handler(self, self->on_send, r, nid, info, ev);
        break;
    case T_RECV:
        rc = call_handler(self, self->on_recv, r, nid, info, ev);
        break;
    case T_LOAD:
    case T_STORE:
        rc = call_handler(self, self->on_mem, r, nid, info, ev);
        break;
    default: /* metadata and kinds no handler takes: done as soon as started */
        rc = push(self, self->now, i, nid, 0);
    }
done:
    Py_DECREF(info);
    return rc;
}

static int resource_of(Kernel *self, PyObject *info)
{
    int cpu, t = node_type(info, &cpu);
    if (t < 0 && PyErr_Occurred())
        return -1;
    int key = key_of(t, cpu);
    return key < 0 ? OTHER_LANE : self->slot_of[key];
}

/* a collective's place among the rank's calls on its group, given as it leaves the feeder */
static int sequence(Rank *r, uint64_t nid, PyObject *info)
{
    long t = PyLong_AsLong(PyTuple_GET_ITEM(info, F_TYPE));
    if (t != T_COLL)
        return (t == -1 && PyErr_Occurred()) ? -1 : 0;
    PyObject *pg = PyTuple_GET_ITEM(info, F_PG);
    PyObject *k = PyDict_GetItemWithError(r->coll_seq, pg); /* borrowed */
    if (k == NULL && PyErr_Occurred())
        return -1;
    long long kv = k ? PyLong_AsLongLong(k) : 0;
    PyObject *next = PyLong_FromLongLong(kv + 1);
    if (next == NULL || PyDict_SetItem(r->coll_seq, pg, next) < 0) {
        Py_XDECREF(next);
        return -1;
    }
    Py_DECREF(next);
    return map_put(&r->seq, nid, kv, 0);
}

/* the feeder's next issuable id: 1 and *nid, 0 for none, -1 on error */
static int next_id(Rank *r, uint64_t *nid)
{
    PyObject *x = PyObject_CallNoArgs(r->next_issuable);
    if (x == NULL)
        return -1;
    if (x == Py_None) {
        Py_DECREF(x);
        return 0;
    }
    *nid = PyLong_AsUnsignedLongLong(x);
    Py_DECREF(x);
    return (*nid == (uint64_t)-1 && PyErr_Occurred()) ? -1 : 1;
}

static int defer(Kernel *self, Rank *r, uint64_t nid, PyObject *info)
{
    int res = resource_of(self, info);
    if (res < 0 || idheap_push(&r->deferred[res], nid) < 0)
        return -1;
    r->n_deferred++;
    return 0;
}

static int issue(Kernel *self, Py_ssize_t i)
{
    Rank *r = &self->ranks[i];
    uint64_t nid;
    int got = next_id(r, &nid);
    if (got < 0)
        return -1;
    if (got && !r->n_deferred) {
        PyObject *more = PyObject_CallNoArgs(r->has_issuable);
        int has = more ? PyObject_IsTrue(more) : -1;
        Py_XDECREF(more);
        if (has < 0)
            return -1;
        if (!has) { /* the common case: one node freed, nothing waiting */
            PyObject *info = PyObject_CallFunction(r->info, "K", (unsigned long long)nid);
            if (info == NULL || sequence(r, nid, info) < 0) {
                Py_XDECREF(info);
                return -1;
            }
            int res = resource_of(self, info);
            if (res < 0) {
                Py_DECREF(info);
                return -1;
            }
            if (r->busy[res] < r->caps[res]) {
                r->busy[res]++;
                return start(self, i, nid, res, info);
            }
            int rc = idheap_push(&r->deferred[res], nid);
            Py_DECREF(info);
            if (rc < 0)
                return -1;
            r->n_deferred++;
            if ((got = next_id(r, &nid)) < 0)
                return -1;
        }
    }
    while (got) {
        PyObject *info = PyObject_CallFunction(r->info, "K", (unsigned long long)nid);
        int rc = (info == NULL || sequence(r, nid, info) < 0) ? -1 : defer(self, r, nid, info);
        Py_XDECREF(info);
        if (rc < 0 || (got = next_id(r, &nid)) < 0)
            return -1;
    }
    while (r->n_deferred) {
        int best = -1;
        uint64_t best_id = 0;
        for (int res = 0; res < NLANES; res++) {
            IdHeap *q = &r->deferred[res];
            if (q->n && r->busy[res] < r->caps[res] && (best < 0 || q->v[0] < best_id)) {
                best = res;
                best_id = q->v[0];
            }
        }
        if (best < 0)
            return 0;
        idheap_pop(&r->deferred[best]);
        r->n_deferred--;
        r->busy[best]++;
        if (start(self, i, best_id, best, NULL) < 0)
            return -1;
    }
    return 0;
}

static int finish(Kernel *self, Py_ssize_t i, uint64_t nid, int64_t t)
{
    Rank *r = &self->ranks[i];
    int64_t ev, res;
    if (!map_pop(&r->live, nid, &ev, &res)) {
        PyErr_Format(PyExc_RuntimeError, "rank %S: node %llu finished twice or never started", r->rank_obj,
                     (unsigned long long)nid);
        return -1;
    }
    self->ev_end[ev] = t;
    r->busy[res]--;
    r->lane_freed_by[res] = ev;
    PyObject *children = PyObject_CallFunction(r->finish, "K", (unsigned long long)nid);
    if (children == NULL)
        return -1;
    PyObject *fast = PySequence_Fast(children, "feeder.finish returns the children it frees");
    Py_DECREF(children);
    if (fast == NULL)
        return -1;
    for (Py_ssize_t c = 0; c < PySequence_Fast_GET_SIZE(fast); c++) {
        uint64_t child = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, c));
        if ((child == (uint64_t)-1 && PyErr_Occurred()) || map_put(&r->freed, child, ev, t) < 0) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return issue(self, i);
}

/* -- the Python face ---------------------------------------------------------------------------- */

static PyObject *Kernel_issue(Kernel *self, PyObject *arg)
{
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0 || i >= self->n)
        return PyErr_Format(PyExc_IndexError, "rank index %zd", i);
    return issue(self, i) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *Kernel_begin(Kernel *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    long long t;
    if (nargs != 2 || (i = PyLong_AsSsize_t(args[0])) < 0 || i >= self->n
        || ((t = PyLong_AsLongLong(args[1])) == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "begin(rank index, t)");
        return NULL;
    }
    return push(self, t, i, 0, 1) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *Kernel_at(Kernel *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "at(t, rank, nid)");
        return NULL;
    }
    Py_ssize_t i;
    if (index_arg(self, args[1], &i) < 0)
        return NULL;
    uint64_t nid = PyLong_AsUnsignedLongLong(args[2]);
    if (nid == (uint64_t)-1 && PyErr_Occurred())
        return NULL;
    int overflow = 0;
    long long t = PyLong_AsLongLongAndOverflow(args[0], &overflow);
    if (t == -1 && PyErr_Occurred())
        return NULL;
    if (overflow) {
        PyObject *res = PyObject_CallFunctionObjArgs(self->past_clock, args[1], args[2], args[0], NULL);
        Py_XDECREF(res);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_OverflowError, "a finish past the replay's clock");
        return NULL;
    }
    return push(self, t, i, nid, 0) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *Kernel_set_pred(Kernel *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long ev, pred;
    if (nargs != 2 || ((ev = PyLong_AsLongLong(args[0])) == -1 && PyErr_Occurred())
        || ((pred = PyLong_AsLongLong(args[1])) == -1 && PyErr_Occurred()))
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_TypeError, "set_pred(ev, pred)"), NULL);
    if (ev < 0 || (size_t)ev >= self->nev || self->ev_pred == NULL)
        return PyErr_Format(PyExc_IndexError, "event %lld", ev);
    self->ev_pred[ev] = pred;
    return Py_NewRef(Py_None);
}

/* the shared heap run dry: engine._run's loop, entries (time, seq, rank, nid), or (time, seq,
 * callback, _CALL) for the policy's own events */
static PyObject *drain_shared(Kernel *self)
{
    while (PyList_GET_SIZE(self->pyheap)) {
        PyObject *e = shared_heappop(self->pyheap);
        if (e == NULL)
            return NULL;
        if (!PyTuple_CheckExact(e) || PyTuple_GET_SIZE(e) != 4) {
            Py_DECREF(e);
            PyErr_SetString(PyExc_TypeError, "a heap entry is (time, seq, rank or callback, node)");
            return NULL;
        }
        long long t = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 0));
        long long kind = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 3));
        int overflow = 0;
        if (kind == -1 && PyErr_Occurred()) { /* a node id past int64 */
            PyErr_Clear();
            kind = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(e, 3), &overflow);
        }
        int rc = -1;
        Py_ssize_t i;
        if ((t == -1 || kind == -1) && PyErr_Occurred())
            goto next;
        self->now = t;
        if (!overflow && kind == -2) { /* a policy's callback (call_at) */
            if (set_now(self) < 0)
                goto next;
            PyObject *res = PyObject_CallOneArg(PyTuple_GET_ITEM(e, 2), PyTuple_GET_ITEM(e, 0));
            rc = res ? 0 : -1;
            Py_XDECREF(res);
        } else if (index_arg(self, PyTuple_GET_ITEM(e, 2), &i) == 0) {
            if (!overflow && kind == -1)
                rc = issue(self, i);
            else {
                uint64_t nid = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(e, 3));
                rc = (nid == (uint64_t)-1 && PyErr_Occurred()) ? -1 : finish(self, i, nid, t);
            }
        }
    next:
        Py_DECREF(e);
        if (rc < 0)
            return NULL;
    }
    return set_now(self) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *Kernel_drain(Kernel *self, PyObject *unused)
{
    if (self->pyheap != NULL)
        return drain_shared(self);
    while (self->hn) {
        Entry e = pop(self);
        self->now = e.t;
        if ((e.begin ? issue(self, e.rank) : finish(self, e.rank, e.nid, e.t)) < 0)
            return NULL;
    }
    return set_now(self) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *Kernel_scheduled(Kernel *self, PyObject *unused)
{
    return PyLong_FromSize_t(self->pyheap ? (size_t)PyList_GET_SIZE(self->pyheap) : self->hn);
}

/* one column as bytes, its storage freed: the result copies one column at a time */
static PyObject *Kernel_take(Kernel *self, PyObject *arg)
{
    static const char *names[] = {"rank", "node", "type", "lane", "start", "end", "pred", NULL};
    void **cols[] = {(void **)&self->ev_rank, (void **)&self->ev_node, (void **)&self->ev_type,
                     (void **)&self->ev_lane, (void **)&self->ev_start, (void **)&self->ev_end,
                     (void **)&self->ev_pred};
    const char *want = PyUnicode_AsUTF8(arg);
    if (want == NULL)
        return NULL;
    if (!strcmp(want, "name")) {
        PyObject *out = self->names ? self->names : Py_None;
        Py_INCREF(out);
        return out;
    }
    for (int c = 0; names[c]; c++) {
        if (strcmp(want, names[c]))
            continue;
        if (*cols[c] == NULL && self->nev)
            return PyErr_Format(PyExc_ValueError, "column %s was taken already", want);
        size_t width = (c == 2 || c == 3) ? 1 : 8;
        PyObject *out = PyBytes_FromStringAndSize(*cols[c] ? (char *)*cols[c] : "", (Py_ssize_t)(self->nev * width));
        if (out != NULL) {
            PyMem_Free(*cols[c]);
            *cols[c] = NULL;
        }
        return out;
    }
    return PyErr_Format(PyExc_KeyError, "no column %R", arg);
}

/* ---- rank_stats: result.finalize's per-rank figures ------------------------------------------ */

typedef struct {
    int64_t s, e;
} Span;

static int span_cmp(const void *a, const void *b)
{
    const Span *x = a, *y = b;
    return x->s < y->s ? -1 : x->s > y->s ? 1 : (x->e < y->e ? -1 : x->e > y->e);
}

/* the spans sorted and merged in place (result.union): how many are left */
static size_t merge(Span *v, size_t n)
{
    qsort(v, n, sizeof(Span), span_cmp);
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].e <= v[i].s)
            continue;
        if (out && v[i].s <= v[out - 1].e) {
            if (v[i].e > v[out - 1].e)
                v[out - 1].e = v[i].e;
        } else
            v[out++] = v[i];
    }
    return out;
}

static int64_t span_length(const Span *v, size_t n)
{
    int64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += v[i].e - v[i].s;
    return total;
}

static int64_t overlap(const Span *a, size_t na, const Span *b, size_t nb)
{
    size_t i = 0, j = 0;
    int64_t total = 0;
    while (i < na && j < nb) {
        int64_t lo = a[i].s > b[j].s ? a[i].s : b[j].s, hi = a[i].e < b[j].e ? a[i].e : b[j].e;
        if (hi > lo)
            total += hi - lo;
        if (a[i].e < b[j].e)
            i++;
        else
            j++;
    }
    return total;
}

/* rank_stats(ranks, lanes, starts, ends, world, compute_lanes, comm_lanes): per rank of `world`
 * (finish, compute, comm, overlap, busy, nodes), as result.ReplayResult._rank_stats computes
 * them; the columns are the events' (8-byte ints but lanes, 1 byte); the lane sets as bit masks.
 * None where the ranks are too sparse for an index by rank (the caller computes them itself). */
static PyObject *rank_stats(PyObject *module, PyObject *args)
{
    PyObject *cols[4], *world, *out = NULL;
    unsigned long comp_mask, comm_mask;
    if (!PyArg_ParseTuple(args, "OOOOOkk", &cols[0], &cols[1], &cols[2], &cols[3], &world, &comp_mask, &comm_mask))
        return NULL;
    Py_buffer b[4];
    int got = 0;
    for (; got < 4; got++)
        if (PyObject_GetBuffer(cols[got], &b[got], PyBUF_SIMPLE) < 0)
            goto release;
    Py_ssize_t n = b[1].len;
    if (b[0].len != n * 8 || b[2].len != n * 8 || b[3].len != n * 8) {
        PyErr_SetString(PyExc_ValueError, "rank_stats: columns of different lengths");
        goto release;
    }
    const int64_t *rank = b[0].buf, *start = b[2].buf, *end = b[3].buf;
    const int8_t *lane = b[1].buf;
    PyObject *fast = PySequence_Fast(world, "world: a sequence of ranks");
    if (fast == NULL)
        goto release;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(fast);
    int64_t top = -1;
    for (Py_ssize_t j = 0; j < m; j++) {
        long long r = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, j));
        if ((r == -1 && PyErr_Occurred()) || r < 0) {
            if (!PyErr_Occurred()) /* a negative rank: left to the Python path */
                out = Py_NewRef(Py_None);
            goto release_fast;
        }
        if (r > top)
            top = r;
    }
    if (top > 16 * (int64_t)(m + n) + 1024) {
        out = Py_NewRef(Py_None);
        goto release_fast;
    }
    Py_ssize_t *index = PyMem_Malloc((size_t)(top + 1) * sizeof(Py_ssize_t));
    size_t *count = PyMem_Calloc((size_t)m + 1, sizeof(size_t)), *order = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(size_t));
    Span *spans = NULL;
    if (index == NULL || count == NULL || order == NULL) {
        PyErr_NoMemory();
        goto free_all;
    }
    for (int64_t r = 0; r <= top; r++)
        index[r] = -1;
    for (Py_ssize_t j = 0; j < m; j++)
        index[PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, j))] = j;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (rank[i] < 0 || rank[i] > top || index[rank[i]] < 0) {
            PyErr_Format(PyExc_ValueError, "rank_stats: event %zd's rank %lld is not in the world", i, (long long)rank[i]);
            goto free_all;
        }
        count[index[rank[i]] + 1]++;
    }
    size_t most = 0;
    for (Py_ssize_t j = 0; j < m; j++) {
        if (count[j + 1] > most)
            most = count[j + 1];
        count[j + 1] += count[j];
    }
    for (Py_ssize_t i = 0; i < n; i++)
        order[count[index[rank[i]]]++] = (size_t)i;
    /* count[j] is now where rank j's events end; they begin where rank j - 1's end */
    spans = PyMem_Malloc((most ? most : 1) * 3 * sizeof(Span));
    out = PyList_New(m);
    if (spans == NULL || out == NULL) {
        Py_CLEAR(out);
        if (spans == NULL)
            PyErr_NoMemory();
        goto free_all;
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        size_t lo = j ? count[j - 1] : 0, hi = count[j], nc = 0, nm = 0, na = 0;
        Span *comp = spans, *comm = spans + most, *all = spans + 2 * most;
        int64_t finish = 0;
        for (size_t k = lo; k < hi; k++) {
            size_t i = order[k];
            Span sp = {start[i], end[i]};
            if (end[i] > finish)
                finish = end[i];
            unsigned long bit = (lane[i] >= 0 && lane[i] < 63) ? 1UL << lane[i] : 0;
            if (comp_mask & bit)
                comp[nc++] = sp;
            if (comm_mask & bit)
                comm[nm++] = sp;
            all[na++] = sp;
        }
        nc = merge(comp, nc);
        nm = merge(comm, nm);
        na = merge(all, na);
        PyObject *row = Py_BuildValue("(LLLLLn)", (long long)finish, (long long)span_length(comp, nc),
                                      (long long)span_length(comm, nm), (long long)overlap(comp, nc, comm, nm),
                                      (long long)span_length(all, na), (Py_ssize_t)(hi - lo));
        if (row == NULL) {
            Py_CLEAR(out);
            goto free_all;
        }
        PyList_SET_ITEM(out, j, row);
    }
free_all:
    PyMem_Free(index);
    PyMem_Free(count);
    PyMem_Free(order);
    PyMem_Free(spans);
release_fast:
    Py_XDECREF(fast);
release:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&b[k]);
    return out;
}

static PyMethodDef module_methods[] = {
    {"rank_stats", (PyCFunction)rank_stats, METH_VARARGS,
     "rank_stats(ranks, lanes, starts, ends, world, compute_mask, comm_mask) -> per rank (finish, compute, "
     "comm, overlap, busy, nodes), or None"},
    {NULL},
};

static PyMethodDef Kernel_methods[] = {
    {"issue", (PyCFunction)Kernel_issue, METH_O, "issue(i): rank index i issues what it can"},
    {"begin", (PyCFunction)(void (*)(void))Kernel_begin, METH_FASTCALL, "begin(i, t): rank index i begins at t"},
    {"at", (PyCFunction)(void (*)(void))Kernel_at, METH_FASTCALL, "at(t, rank, nid): the node finishes at t"},
    {"set_pred", (PyCFunction)(void (*)(void))Kernel_set_pred, METH_FASTCALL, "set_pred(ev, pred)"},
    {"drain", (PyCFunction)Kernel_drain, METH_NOARGS, "run the heap dry"},
    {"scheduled", (PyCFunction)Kernel_scheduled, METH_NOARGS, "entries on the heap"},
    {"take", (PyCFunction)Kernel_take, METH_O,
     "take(column): rank, node, start, end, pred (8 bytes each), type, lane (1) as bytes; name: the list"},
    {NULL},
};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chakra_tools.replay._kernel.Kernel",
    .tp_basicsize = sizeof(Kernel),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Kernel_init,
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_traverse = (traverseproc)Kernel_traverse,
    .tp_clear = (inquiry)Kernel_clear,
    .tp_methods = Kernel_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernel", "The replayer's event loop in C.", -1,
                                    module_methods};

PyMODINIT_FUNC PyInit__kernel(void)
{
    if (PyType_Ready(&KernelType) < 0)
        return NULL;
#define INTERN(var, text)                                                                               \
    if ((var = PyUnicode_InternFromString(text)) == NULL)                                               \
        return NULL;
    INTERN(s_now, "_now");
    INTERN(s_next_issuable, "next_issuable");
    INTERN(s_has_issuable, "has_issuable");
    INTERN(s_info, "info");
    INTERN(s_finish, "finish");
    INTERN(s_feeder, "feeder");
    INTERN(s_caps, "caps");
    INTERN(s_rank, "rank");
    INTERN(s_coll_seq, "coll_seq");
#undef INTERN
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&KernelType);
    if (PyModule_AddObject(m, "Kernel", (PyObject *)&KernelType) < 0)
        return NULL;
    return m;
}
