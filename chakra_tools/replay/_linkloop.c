/* The congestion-aware model's hot loop in C: links as FIFO queues (linknet.LinkNetwork's state)
 * and a chunk's phase on one ring run step by step (congestion._Steps), event for event as the
 * Python reference runs them: the same calls to the replay's scheduler `at(time, callback)`, in
 * the same order, so ties between events resolve the same way and the two agree to the ns
 * (tests/replay/test_congestion.py runs both on the same inputs).
 *
 *     LinkState(bytes_per_ns, latency_ns)   per link: its rate (bytes/ns) and latency (ns)
 *         .hop(link, t, size) -> end        one message takes the link from t (or when it is free)
 *         .idle(link, size)                 counted, not queued (congestion-unaware on the links)
 *         .usage(link) -> (busy_ns, messages)
 *     StepPlan(to, peers, routes, expected, pre, msg, post)   a phase on one ring, parsed once
 *     Steps(state, heap, counter, tag, plan, queues, on_done)  one run of it
 *         .begin(i, t)                      position i of the ring begins the phase at t
 *
 * An event, once called, runs the phases' events that follow it on the heap too (`drain`), up to
 * the next that is not one of them or is a member's end: the replay's loop sees only those.
 *
 * `heap`, `counter`, `tag`: the replay's event heap, where an event at t is pushed as
 * (t, next(counter), callback, tag), the entry the engine's `call_at` pushes;
 * `peers[i]`: every position i sends to in some step, `routes[i][k]` the link indices to
 * `peers[i][k]`; `to[s][i]`: the k (into peers[i]) position i sends step s to, nearest first;
 * `expected[s][i]`: how many messages of step s it waits for; `pre`, `msg`, `post`: per step;
 * `queues`: False prices each message on idle links; `on_done(i, t)`: position i finished the
 * phase at t.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* ---- LinkState -------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    double *bpn, *lat;
    int64_t *free_ns, *busy_ns, *msgs;
} LinkState;

static void LinkState_dealloc(LinkState *self)
{
    PyMem_Free(self->bpn);
    PyMem_Free(self->lat);
    PyMem_Free(self->free_ns);
    PyMem_Free(self->busy_ns);
    PyMem_Free(self->msgs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int LinkState_init(LinkState *self, PyObject *args, PyObject *kw)
{
    PyObject *rates, *lats;
    if (!PyArg_ParseTuple(args, "OO", &rates, &lats))
        return -1;
    PyObject *r = PySequence_Fast(rates, "rates"), *l = PySequence_Fast(lats, "latencies");
    if (r == NULL || l == NULL) {
        Py_XDECREF(r);
        Py_XDECREF(l);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(r);
    if (PySequence_Fast_GET_SIZE(l) != n) {
        PyErr_SetString(PyExc_ValueError, "LinkState: as many latencies as rates");
        Py_DECREF(r);
        Py_DECREF(l);
        return -1;
    }
    self->n = n;
    self->bpn = PyMem_Calloc(n ? n : 1, sizeof(double));
    self->lat = PyMem_Calloc(n ? n : 1, sizeof(double));
    self->free_ns = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    self->busy_ns = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    self->msgs = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    if (!self->bpn || !self->lat || !self->free_ns || !self->busy_ns || !self->msgs) {
        Py_DECREF(r);
        Py_DECREF(l);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        self->bpn[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(r, i));
        self->lat[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(l, i));
    }
    Py_DECREF(r);
    Py_DECREF(l);
    return PyErr_Occurred() ? -1 : 0;
}

/* One message on link k from t: when its last byte reaches the link's far end. */
static inline int64_t take(LinkState *st, Py_ssize_t k, int64_t t, int64_t size)
{
    int64_t free = st->free_ns[k];
    int64_t start = t > free ? t : free;
    double per = st->bpn[k];
    int64_t ser = (int64_t)((double)size / per);
    st->free_ns[k] = start + ser;
    st->busy_ns[k] += ser;
    st->msgs[k] += 1;
    return start + (int64_t)(st->lat[k] + (double)size / per);
}

/* One message counted on link k as if it had the link to itself; when it would reach the far end
 * from t. */
static inline int64_t alone(LinkState *st, Py_ssize_t k, int64_t t, int64_t size)
{
    st->busy_ns[k] += (int64_t)((double)size / st->bpn[k]);
    st->msgs[k] += 1;
    return t + (int64_t)(st->lat[k] + (double)size / st->bpn[k]);
}

/* Whether k names a link of st (else IndexError, naming the method). */
static int is_link(LinkState *st, Py_ssize_t k, const char *method)
{
    if (k >= 0 && k < st->n)
        return 1;
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_IndexError, "LinkState.%s: no link %zd", method, k);
    return 0;
}

static PyObject *LinkState_hop(LinkState *self, PyObject *args)
{
    Py_ssize_t k;
    long long t, size;
    if (!PyArg_ParseTuple(args, "nLL", &k, &t, &size) || !is_link(self, k, "hop"))
        return NULL;
    return PyLong_FromLongLong(take(self, k, t, size));
}

static PyObject *LinkState_idle(LinkState *self, PyObject *args)
{
    Py_ssize_t k;
    long long size;
    if (!PyArg_ParseTuple(args, "nL", &k, &size) || !is_link(self, k, "idle"))
        return NULL;
    alone(self, k, 0, size);
    Py_RETURN_NONE;
}

static PyObject *LinkState_usage(LinkState *self, PyObject *arg)
{
    Py_ssize_t k = PyLong_AsSsize_t(arg);
    if (!is_link(self, k, "usage"))
        return NULL;
    return Py_BuildValue("(LL)", (long long)self->busy_ns[k], (long long)self->msgs[k]);
}

static PyMethodDef LinkState_methods[] = {
    {"hop", (PyCFunction)LinkState_hop, METH_VARARGS, "hop(link, t, size) -> end"},
    {"idle", (PyCFunction)LinkState_idle, METH_VARARGS, "idle(link, size): counted, not queued"},
    {"usage", (PyCFunction)LinkState_usage, METH_O, "usage(link) -> (busy_ns, messages)"},
    {NULL},
};

static PyTypeObject LinkStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chakra_tools.replay._linkloop.LinkState",
    .tp_basicsize = sizeof(LinkState),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)LinkState_init,
    .tp_dealloc = (destructor)LinkState_dealloc,
    .tp_methods = LinkState_methods,
};

/* ---- Steps ------------------------------------------------------------------------------------ */

/* What every run of one phase on one ring shares, parsed once (`StepPlan`). */
typedef struct {
    PyObject_HEAD
    PyObject *routes, *peers;         /* per position: link-index tuples / positions */
    int n, steps;
    PyObject *to;                     /* to[s][i]: tuple of indices into peers[i] */
    int *expected;                    /* [s * n + i] */
    int64_t *pre, *msg, *post;        /* [s] */
} StepPlan;

static PyTypeObject StepPlanType;

typedef struct {
    PyObject_HEAD
    LinkState *state;
    StepPlan *plan;
    PyObject *heap, *counter, *tag, *on_done;
    PyObject *routes, *peers, *to;    /* the plan's, borrowed */
    int n, steps, queues;
    int *expected;                    /* the plan's */
    int64_t *pre, *msg, *post;        /* the plan's */
    int64_t *sent, *came;             /* [i * steps + s] */
    int *got;
} Steps;

typedef struct {
    PyObject_HEAD
    Steps *run;
    int op, i, s, j, hop;
} Ev;

enum { EV_SEND, EV_HOP, EV_ARRIVE, EV_DONE };

static PyTypeObject EvType;
static PyObject *heappush, *heappop;  /* heapq's */

static int schedule(Steps *run, int64_t t, int op, int i, int s, int j, int hop)
{
    Ev *ev = PyObject_New(Ev, &EvType);
    if (ev == NULL)
        return -1;
    Py_INCREF(run);
    ev->run = run;
    ev->op = op;
    ev->i = i;
    ev->s = s;
    ev->j = j;
    ev->hop = hop;
    PyObject *when = PyLong_FromLongLong(t), *seq = PyIter_Next(run->counter);
    PyObject *item = when && seq ? PyTuple_Pack(4, when, seq, (PyObject *)ev, run->tag) : NULL;
    Py_XDECREF(when);
    Py_XDECREF(seq);
    Py_DECREF(ev);
    if (item == NULL)
        return -1;
    PyObject *argv[2] = {run->heap, item};
    PyObject *r = PyObject_Vectorcall(heappush, argv, 2, NULL);
    Py_DECREF(item);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int progress(Steps *run, int i, int s)
{
    int64_t sent = run->sent[i * run->steps + s];
    if (sent < 0 || run->got[i * run->steps + s] < run->expected[s * run->n + i])
        return 0;
    int64_t came = run->came[i * run->steps + s];
    int64_t ready = (sent > came ? sent : came) + run->post[s];
    if (s + 1 < run->steps)
        return schedule(run, ready + run->pre[s + 1], EV_SEND, i, s + 1, 0, 0);
    return schedule(run, ready, EV_DONE, i, s, 0, 0);
}

static int arrive(Steps *run, int j, int s, int64_t t)
{
    run->got[j * run->steps + s] += 1;
    if (t > run->came[j * run->steps + s])
        run->came[j * run->steps + s] = t;
    return progress(run, j, s);
}

/* The message of step s from i to its k-th peer reaches hop `hop` of its route at t. */
static int move(Steps *run, int i, int k, int s, int hop, int64_t t)
{
    PyObject *route = PyTuple_GET_ITEM(PyTuple_GET_ITEM(run->routes, i), k);
    Py_ssize_t hops = PyTuple_GET_SIZE(route);
    int64_t end = take(run->state, PyLong_AsSsize_t(PyTuple_GET_ITEM(route, hop)), t, run->msg[s]);
    if (hop + 1 == hops) {
        int j = (int)PyLong_AsLong(PyTuple_GET_ITEM(PyTuple_GET_ITEM(run->peers, i), k));
        return arrive(run, j, s, end);
    }
    return schedule(run, end, EV_HOP, i, s, k, hop + 1);
}

static int send_step(Steps *run, int i, int s, int64_t now)
{
    PyObject *to = PyTuple_GET_ITEM(PyTuple_GET_ITEM(run->to, s), i);
    int64_t size = run->msg[s];
    PyObject *peers = PyTuple_GET_ITEM(run->peers, i), *routes = PyTuple_GET_ITEM(run->routes, i);
    for (Py_ssize_t x = 0; x < PyTuple_GET_SIZE(to); x++) {
        int k = (int)PyLong_AsLong(PyTuple_GET_ITEM(to, x));
        int j = (int)PyLong_AsLong(PyTuple_GET_ITEM(peers, k));
        PyObject *route = PyTuple_GET_ITEM(routes, k);
        Py_ssize_t hops = PyTuple_GET_SIZE(route);
        if (hops == 0 || size <= 0) {  /* latency only, an event of its own (as LinkNetwork.send) */
            int64_t lat = 0;
            for (Py_ssize_t h = 0; h < hops; h++)
                lat += (int64_t)run->state->lat[PyLong_AsSsize_t(PyTuple_GET_ITEM(route, h))];
            if (schedule(run, now + lat, EV_ARRIVE, i, s, j, 0))
                return -1;
            continue;
        }
        if (!run->queues) {  /* each hop as if alone: the hops' sum, as LinkNetwork.send */
            int64_t end = now;
            for (Py_ssize_t h = 0; h < hops; h++)
                end = alone(run->state, PyLong_AsSsize_t(PyTuple_GET_ITEM(route, h)), end, size);
            if (arrive(run, j, s, end))
                return -1;
            continue;
        }
        if (move(run, i, k, s, 0, now))
            return -1;
    }
    run->sent[i * run->steps + s] = now;
    return progress(run, i, s);
}

/* One event of a phase at t: 0, or -1 with an exception set. */
static int dispatch(Ev *self, int64_t t)
{
    Steps *run = self->run;
    switch (self->op) {
    case EV_SEND:
        return send_step(run, self->i, self->s, t);
    case EV_HOP:
        return move(run, self->i, self->j, self->s, self->hop, t);
    case EV_ARRIVE:
        return arrive(run, self->j, self->s, t);
    default: {
        PyObject *r = PyObject_CallFunction(run->on_done, "iL", self->i, (long long)t);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        return 0;
    }
    }
}

/* The events of phases that are next on the replay's heap, popped and run here, as the replay's
 * loop would pop and call them one by one: none of them reads or changes anything of the replay
 * but the heap (a member's end, EV_DONE, is left to the loop, which sets its clock first). Most
 * of a congestion-aware replay's events are these messages and hops. */
static int drain(PyObject *heap)
{
    while (PyList_GET_SIZE(heap) > 0) {
        PyObject *top = PyList_GET_ITEM(heap, 0);
        if (!PyTuple_Check(top) || PyTuple_GET_SIZE(top) != 4)
            return 0;
        PyObject *obj = PyTuple_GET_ITEM(top, 2);
        if (Py_TYPE(obj) != &EvType || ((Ev *)obj)->op == EV_DONE)
            return 0;
        PyObject *item = PyObject_Vectorcall(heappop, &heap, 1, NULL);
        if (item == NULL)
            return -1;
        Ev *ev = (Ev *)PyTuple_GET_ITEM(item, 2);
        Py_INCREF(ev);
        long long t = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 0));
        Py_DECREF(item);
        int bad = (t == -1 && PyErr_Occurred()) ? -1 : dispatch(ev, t);
        Py_DECREF(ev);
        if (bad)
            return -1;
    }
    return 0;
}

static PyObject *Ev_call(Ev *self, PyObject *args, PyObject *kw)
{
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != 1) {
        PyErr_SetString(PyExc_TypeError, "an event is called with its time");
        return NULL;
    }
    long long t = PyLong_AsLongLong(PyTuple_GET_ITEM(args, 0));
    if (t == -1 && PyErr_Occurred())
        return NULL;
    if (dispatch(self, t) || (self->op != EV_DONE && drain(self->run->heap)))
        return NULL;
    Py_RETURN_NONE;
}

static void Ev_dealloc(Ev *self)
{
    Py_XDECREF(self->run);
    PyObject_Del(self);
}

static PyTypeObject EvType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chakra_tools.replay._linkloop.Event",
    .tp_basicsize = sizeof(Ev),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_call = (ternaryfunc)Ev_call,
    .tp_dealloc = (destructor)Ev_dealloc,
};

static void Steps_dealloc(Steps *self)
{
    Py_XDECREF(self->state);
    Py_XDECREF(self->plan);
    Py_XDECREF(self->heap);
    Py_XDECREF(self->counter);
    Py_XDECREF(self->tag);
    Py_XDECREF(self->on_done);
    PyMem_Free(self->sent);
    PyMem_Free(self->came);
    PyMem_Free(self->got);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void StepPlan_dealloc(StepPlan *self)
{
    Py_XDECREF(self->routes);
    Py_XDECREF(self->peers);
    Py_XDECREF(self->to);
    PyMem_Free(self->expected);
    PyMem_Free(self->pre);
    PyMem_Free(self->msg);
    PyMem_Free(self->post);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ints(PyObject *seq, int64_t *out, Py_ssize_t n, const char *what)
{
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "StepPlan: %s must be a tuple of %zd", what, n);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++)
        out[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, k));
    return PyErr_Occurred() ? -1 : 0;
}

static int StepPlan_init(StepPlan *self, PyObject *args, PyObject *kw)
{
    PyObject *to, *peers, *routes, *expected, *pre, *msg, *post;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &to, &peers, &routes, &expected, &pre, &msg, &post))
        return -1;
    if (!PyTuple_Check(to) || !PyTuple_Check(expected) || !PyTuple_Check(routes) || !PyTuple_Check(peers)
        || PyTuple_GET_SIZE(to) < 1 || PyTuple_GET_SIZE(expected) != PyTuple_GET_SIZE(to)
        || !PyTuple_Check(PyTuple_GET_ITEM(to, 0))) {
        PyErr_SetString(PyExc_ValueError, "StepPlan: to and expected are tuples, one per step");
        return -1;
    }
    Py_ssize_t steps = PyTuple_GET_SIZE(to), n = PyTuple_GET_SIZE(PyTuple_GET_ITEM(to, 0));
    if (PyTuple_GET_SIZE(routes) != n || PyTuple_GET_SIZE(peers) != n) {
        PyErr_SetString(PyExc_ValueError, "StepPlan: peers and routes have one entry per position");
        return -1;
    }
    self->n = (int)n;
    self->steps = (int)steps;
    self->expected = PyMem_Calloc(steps * n, sizeof(int));
    self->pre = PyMem_Calloc(steps, sizeof(int64_t));
    self->msg = PyMem_Calloc(steps, sizeof(int64_t));
    self->post = PyMem_Calloc(steps, sizeof(int64_t));
    if (!self->expected || !self->pre || !self->msg || !self->post) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t s = 0; s < steps; s++) {
        PyObject *row = PyTuple_GET_ITEM(expected, s);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != n || !PyTuple_Check(PyTuple_GET_ITEM(to, s))
            || PyTuple_GET_SIZE(PyTuple_GET_ITEM(to, s)) != n) {
            PyErr_SetString(PyExc_ValueError, "StepPlan: a step's rows have one entry per position");
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            self->expected[s * n + i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(row, i));
    }
    if (ints(pre, self->pre, steps, "pre") || ints(msg, self->msg, steps, "msg") || ints(post, self->post, steps, "post"))
        return -1;
    Py_INCREF(to);
    self->to = to;
    Py_INCREF(routes);
    self->routes = routes;
    Py_INCREF(peers);
    self->peers = peers;
    return 0;
}

static int Steps_init(Steps *self, PyObject *args, PyObject *kw)
{
    PyObject *state, *heap, *counter, *tag, *plan, *on_done;
    int queues;
    if (!PyArg_ParseTuple(args, "O!O!OOO!pO", &LinkStateType, &state, &PyList_Type, &heap, &counter, &tag,
                          &StepPlanType, &plan, &queues, &on_done))
        return -1;
    if (!PyIter_Check(counter)) {
        PyErr_SetString(PyExc_TypeError, "Steps: counter must be an iterator (itertools.count)");
        return -1;
    }
    StepPlan *p = (StepPlan *)plan;
    Py_ssize_t cells = (Py_ssize_t)p->steps * p->n;
    self->sent = PyMem_Malloc(cells * sizeof(int64_t));
    self->came = PyMem_Calloc(cells, sizeof(int64_t));
    self->got = PyMem_Calloc(cells, sizeof(int));
    if (!self->sent || !self->came || !self->got) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < cells; k++)
        self->sent[k] = -1;
    Py_INCREF(plan);
    self->plan = p;
    self->n = p->n;
    self->steps = p->steps;
    self->to = p->to;
    self->routes = p->routes;
    self->peers = p->peers;
    self->expected = p->expected;
    self->pre = p->pre;
    self->msg = p->msg;
    self->post = p->post;
    self->queues = queues;
    Py_INCREF(state);
    self->state = (LinkState *)state;
    Py_INCREF(heap);
    self->heap = heap;
    Py_INCREF(counter);
    self->counter = counter;
    Py_INCREF(tag);
    self->tag = tag;
    Py_INCREF(on_done);
    self->on_done = on_done;
    return 0;
}

static PyObject *Steps_begin(Steps *self, PyObject *args)
{
    int i;
    long long t;
    if (!PyArg_ParseTuple(args, "iL", &i, &t))
        return NULL;
    if (i < 0 || i >= self->n) {
        PyErr_SetString(PyExc_IndexError, "Steps.begin: no such position");
        return NULL;
    }
    if (schedule(self, t + self->pre[0], EV_SEND, i, 0, 0, 0))
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef Steps_methods[] = {
    {"begin", (PyCFunction)Steps_begin, METH_VARARGS, "begin(i, t): position i begins the phase at t"},
    {NULL},
};

static PyTypeObject StepsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chakra_tools.replay._linkloop.Steps",
    .tp_basicsize = sizeof(Steps),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Steps_init,
    .tp_dealloc = (destructor)Steps_dealloc,
    .tp_methods = Steps_methods,
};

static PyTypeObject StepPlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chakra_tools.replay._linkloop.StepPlan",
    .tp_basicsize = sizeof(StepPlan),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)StepPlan_init,
    .tp_dealloc = (destructor)StepPlan_dealloc,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_linkloop", "The congestion-aware model's hot loop.", -1, NULL};

PyMODINIT_FUNC PyInit__linkloop(void)
{
    if (PyType_Ready(&LinkStateType) < 0 || PyType_Ready(&StepsType) < 0 || PyType_Ready(&EvType) < 0
        || PyType_Ready(&StepPlanType) < 0)
        return NULL;
    PyObject *heapq = PyImport_ImportModule("heapq");
    if (heapq == NULL)
        return NULL;
    heappush = PyObject_GetAttrString(heapq, "heappush");
    heappop = PyObject_GetAttrString(heapq, "heappop");
    Py_DECREF(heapq);
    if (heappush == NULL || heappop == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&LinkStateType);
    Py_INCREF(&StepsType);
    Py_INCREF(&StepPlanType);
    if (PyModule_AddObject(m, "LinkState", (PyObject *)&LinkStateType) < 0
        || PyModule_AddObject(m, "Steps", (PyObject *)&StepsType) < 0
        || PyModule_AddObject(m, "StepPlan", (PyObject *)&StepPlanType) < 0)
        return NULL;
    return m;
}
