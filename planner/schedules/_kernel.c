/* The simulator's inner loop in C: a longest-path pass over a compiled schedule.
 *
 * The same arithmetic, in the same order, as the pure-Python loops it replaces
 * (planner/schedules/kernel.py: run_python, critical_python); IEEE doubles with no
 * contraction, so the results are bit-identical (tests/planner/schedules/test_kernel.py).
 *
 * ops: int32, 6 per action in topological order: rank, duration slot, dep 1, lag slot 1,
 * dep 2, lag slot 2; a missing dependency is -1 (end time 0.0), lag slot 0 is "no p2p".
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer ops, dur, lag;
    Py_ssize_t n;
} Tables;

static void release(Tables *t) {
    PyBuffer_Release(&t->ops);
    PyBuffer_Release(&t->dur);
    PyBuffer_Release(&t->lag);
}

/* Check the tables: every index an op reads must lie inside its table. */
static int check(Tables *t, int pp) {
    if (t->ops.itemsize != 4 || t->ops.len % 24 != 0 || t->dur.itemsize != 8 ||
        t->lag.itemsize != 8 || pp <= 0) {
        PyErr_SetString(PyExc_ValueError, "kernel: ops must be int32 x 6, tables float64");
        return -1;
    }
    t->n = t->ops.len / 24;
    const int *ops = (const int *)t->ops.buf;
    Py_ssize_t n_dur = t->dur.len / 8, n_lag = t->lag.len / 8;
    for (Py_ssize_t i = 0; i < t->n; i++) {
        const int *o = ops + 6 * i;
        if (o[0] < 0 || o[0] >= pp || o[1] < 0 || o[1] >= n_dur || o[2] < -1 || o[2] >= i ||
            o[4] < -1 || o[4] >= i || o[3] < 0 || o[3] >= n_lag || o[5] < 0 || o[5] >= n_lag) {
            PyErr_Format(PyExc_ValueError, "kernel: op %zd out of range", i);
            return -1;
        }
    }
    return 0;
}

/* end[i] of every action; pred[i] (if not NULL): the predecessor on a longest path (the
 * previous action of the rank unless a dependency ends later, -1 for none) and pred_lag[i]
 * the lag slot of the edge taken (0: same rank). Returns -1 on allocation failure. */
static int longest(Tables *t, int pp, double *start, double *end, double *busy, int *pred,
                   int *pred_lag) {
    const int *ops = (const int *)t->ops.buf;
    const double *dur = (const double *)t->dur.buf, *lag = (const double *)t->lag.buf;
    double *free_at = calloc((size_t)pp, sizeof(double));
    int *last = malloc((size_t)pp * sizeof(int));
    if (free_at == NULL || last == NULL) {
        free(free_at);
        free(last);
        PyErr_NoMemory();
        return -1;
    }
    for (int r = 0; r < pp; r++) last[r] = -1;
    for (Py_ssize_t i = 0; i < t->n; i++) {
        const int *o = ops + 6 * i;
        int rank = o[0];
        double t0 = free_at[rank];
        int p = last[rank], pl = 0;
        double ready = (o[2] >= 0 ? end[o[2]] : 0.0) + lag[o[3]];
        if (ready > t0) {
            t0 = ready;
            p = o[2];
            pl = o[3];
        }
        ready = (o[4] >= 0 ? end[o[4]] : 0.0) + lag[o[5]];
        if (ready > t0) {
            t0 = ready;
            p = o[4];
            pl = o[5];
        }
        double d = dur[o[1]];
        if (start != NULL) start[i] = t0;
        end[i] = free_at[rank] = t0 + d;
        if (busy != NULL) busy[rank] += d;
        if (pred != NULL) {
            pred[i] = p;
            pred_lag[i] = pl;
        }
        last[rank] = (int)i;
    }
    free(free_at);
    free(last);
    return 0;
}

/* run(ops, dur, lag, pp, start_out, end_out, busy_out) -> makespan: start and end time of
 * every action and each rank's busy time, written into the float64 buffers given; returns
 * the largest end time (0.0 without actions). */
static PyObject *run(PyObject *self, PyObject *args) {
    Tables t;
    int pp;
    Py_buffer start, end, busy;
    if (!PyArg_ParseTuple(args, "y*y*y*iw*w*w*", &t.ops, &t.dur, &t.lag, &pp, &start, &end,
                          &busy))
        return NULL;
    PyObject *result = NULL;
    if (check(&t, pp) < 0) goto done;
    if (start.len < t.n * 8 || end.len < t.n * 8 || busy.len < pp * 8) {
        PyErr_SetString(PyExc_ValueError, "kernel.run: output buffers too small");
        goto done;
    }
    double *b = (double *)busy.buf;
    for (int r = 0; r < pp; r++) b[r] = 0.0;
    if (longest(&t, pp, (double *)start.buf, (double *)end.buf, b, NULL, NULL) < 0) goto done;
    double makespan = 0.0;
    const double *e = (const double *)end.buf;
    for (Py_ssize_t i = 0; i < t.n; i++)
        if (e[i] > makespan) makespan = e[i];
    result = PyFloat_FromDouble(makespan);
done:
    release(&t);
    PyBuffer_Release(&start);
    PyBuffer_Release(&end);
    PyBuffer_Release(&busy);
    return result;
}

/* critical(ops, dur, lag, pp, num_stages, counts_out, x_out) -> makespan: one longest path,
 * its visits per duration slot (int32, 4 x num_stages: kind-major as the slots) and per
 * boundary (int32, num_stages - 1), added into the zeroed buffers given. */
static PyObject *critical(PyObject *self, PyObject *args) {
    Tables t;
    int pp, n_st;
    Py_buffer counts, xs;
    if (!PyArg_ParseTuple(args, "y*y*y*iiw*w*", &t.ops, &t.dur, &t.lag, &pp, &n_st, &counts,
                          &xs))
        return NULL;
    PyObject *result = NULL;
    double *end = NULL;
    int *pred = NULL, *pred_lag = NULL;
    if (check(&t, pp) < 0) goto done;
    if (counts.itemsize != 4 || xs.itemsize != 4 || counts.len < 4 * n_st * 4 ||
        xs.len < (n_st > 1 ? n_st - 1 : 0) * 4 || t.dur.len / 8 > 4 * (Py_ssize_t)n_st ||
        t.lag.len / 8 > n_st) {
        PyErr_SetString(PyExc_ValueError, "kernel.critical: bad output buffers");
        goto done;
    }
    if (t.n == 0) {
        result = PyFloat_FromDouble(0.0);
        goto done;
    }
    end = malloc((size_t)t.n * sizeof(double));
    pred = malloc((size_t)t.n * sizeof(int));
    pred_lag = malloc((size_t)t.n * sizeof(int));
    if (end == NULL || pred == NULL || pred_lag == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (longest(&t, pp, NULL, end, NULL, pred, pred_lag) < 0) goto done;
    Py_ssize_t cur = 0;
    for (Py_ssize_t i = 1; i < t.n; i++)
        if (end[i] > end[cur]) cur = i;
    double makespan = end[cur];
    int *c = (int *)counts.buf, *x = (int *)xs.buf;
    const int *ops = (const int *)t.ops.buf;
    while (cur >= 0) {
        c[ops[6 * cur + 1]] += 1;
        if (pred_lag[cur] > 0) x[pred_lag[cur] - 1] += 1;
        cur = pred[cur];
    }
    result = PyFloat_FromDouble(makespan);
done:
    free(end);
    free(pred);
    free(pred_lag);
    release(&t);
    PyBuffer_Release(&counts);
    PyBuffer_Release(&xs);
    return result;
}

/* A compiled schedule checked once (prepare), for the repeated passes of the search: the rows
 * copied, each missing dependency pointing at a sentinel end time 0.0 (index n), and the
 * largest duration and lag slots they read, so each pass checks only its tables' lengths. */
typedef struct {
    Py_ssize_t n;
    int pp, max_slot, max_lag;
    int ops[];  /* 6 per action, as the flat table, deps -1 -> n */
} Prepared;

#define PREPARED "planner.schedules._kernel.Prepared"

static void prepared_free(PyObject *capsule) {
    PyMem_Free(PyCapsule_GetPointer(capsule, PREPARED));
}

/* prepare(ops, pp) -> handle: the rows checked (as run checks them) and kept. */
static PyObject *prepare(PyObject *self, PyObject *args) {
    Tables t;
    int pp;
    if (!PyArg_ParseTuple(args, "y*i", &t.ops, &pp)) return NULL;
    t.dur.obj = t.lag.obj = NULL;
    PyObject *result = NULL;
    if (t.ops.itemsize != 4 || t.ops.len % 24 != 0 || pp <= 0 || t.ops.len / 24 > INT_MAX - 1) {
        PyErr_SetString(PyExc_ValueError, "kernel.prepare: ops must be int32 x 6");
        goto done;
    }
    Py_ssize_t n = t.ops.len / 24;
    Prepared *p = PyMem_Malloc(sizeof(Prepared) + (size_t)t.ops.len);
    if (p == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    p->n = n;
    p->pp = pp;
    p->max_slot = p->max_lag = 0;
    const int *ops = (const int *)t.ops.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int *o = ops + 6 * i;
        if (o[0] < 0 || o[0] >= pp || o[1] < 0 || o[2] < -1 || o[2] >= i || o[4] < -1 ||
            o[4] >= i || o[3] < 0 || o[5] < 0) {
            PyMem_Free(p);
            PyErr_Format(PyExc_ValueError, "kernel.prepare: op %zd out of range", i);
            goto done;
        }
        int *q = p->ops + 6 * i;
        q[0] = o[0];
        q[1] = o[1];
        q[2] = o[2] >= 0 ? o[2] : (int)n;
        q[3] = o[3];
        q[4] = o[4] >= 0 ? o[4] : (int)n;
        q[5] = o[5];
        if (o[1] > p->max_slot) p->max_slot = o[1];
        if (o[3] > p->max_lag) p->max_lag = o[3];
        if (o[5] > p->max_lag) p->max_lag = o[5];
    }
    result = PyCapsule_New(p, PREPARED, prepared_free);
    if (result == NULL) PyMem_Free(p);
done:
    PyBuffer_Release(&t.ops);
    return result;
}

/* The prepared rows and the duration and lag tables, their lengths checked against the slots
 * the rows read. */
static Prepared *prepared_tables(PyObject *handle, Py_buffer *dur, Py_buffer *lag) {
    Prepared *p = PyCapsule_GetPointer(handle, PREPARED);
    if (p == NULL) return NULL;
    if (dur->itemsize != 8 || lag->itemsize != 8 || dur->len / 8 <= p->max_slot ||
        lag->len / 8 <= p->max_lag) {
        PyErr_SetString(PyExc_ValueError, "kernel: duration or lag table too short");
        return NULL;
    }
    return p;
}

/* The longest-path pass of `longest` over prepared rows: end (n + 1, end[n] = 0.0), each
 * rank's busy time (if busy) and the longest path's predecessors (if pred). */
static void prepared_longest(const Prepared *p, const double *dur, const double *lag,
                             double *end, double *free_at, int *last, double *busy, int *pred,
                             int *pred_lag) {
    end[p->n] = 0.0;
    for (int r = 0; r < p->pp; r++) {
        free_at[r] = 0.0;
        last[r] = -1;
    }
    const int *o = p->ops;
    for (Py_ssize_t i = 0; i < p->n; i++, o += 6) {
        int rank = o[0];
        double t0 = free_at[rank];
        int q = last[rank], pl = 0;
        double ready = end[o[2]] + lag[o[3]];
        if (ready > t0) {
            t0 = ready;
            q = o[2];
            pl = o[3];
        }
        ready = end[o[4]] + lag[o[5]];
        if (ready > t0) {
            t0 = ready;
            q = o[4];
            pl = o[5];
        }
        double d = dur[o[1]];
        end[i] = free_at[rank] = t0 + d;
        if (busy != NULL) busy[rank] += d;
        if (pred != NULL) {
            pred[i] = q == (int)p->n ? -1 : q;
            pred_lag[i] = pl;
        }
        last[rank] = (int)i;
    }
}

/* makespan(handle, dur, lag, busy_out) -> makespan: run's makespan and busy times without
 * the start and end times. */
static PyObject *makespan(PyObject *self, PyObject *args) {
    PyObject *handle;
    Py_buffer dur, lag, busy;
    if (!PyArg_ParseTuple(args, "Oy*y*w*", &handle, &dur, &lag, &busy)) return NULL;
    PyObject *result = NULL;
    double *end = NULL;
    Prepared *p = prepared_tables(handle, &dur, &lag);
    if (p == NULL) goto done;
    if (busy.itemsize != 8 || busy.len < p->pp * 8) {
        PyErr_SetString(PyExc_ValueError, "kernel.makespan: busy buffer too small");
        goto done;
    }
    end = PyMem_Malloc((size_t)(p->n + 1) * sizeof(double) + (size_t)p->pp * (sizeof(double) +
                                                                               sizeof(int)));
    if (end == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    double *free_at = end + p->n + 1;
    int *last = (int *)(free_at + p->pp);
    double *b = (double *)busy.buf;
    for (int r = 0; r < p->pp; r++) b[r] = 0.0;
    prepared_longest(p, (const double *)dur.buf, (const double *)lag.buf, end, free_at, last, b,
                     NULL, NULL);
    double top = 0.0;
    for (Py_ssize_t i = 0; i < p->n; i++)
        if (end[i] > top) top = end[i];
    result = PyFloat_FromDouble(top);
done:
    PyMem_Free(end);
    PyBuffer_Release(&dur);
    PyBuffer_Release(&lag);
    PyBuffer_Release(&busy);
    return result;
}

/* critical_prepared(handle, dur, lag, num_stages, counts_out, x_out) -> makespan: critical
 * over prepared rows. */
static PyObject *critical_prepared(PyObject *self, PyObject *args) {
    PyObject *handle;
    Py_buffer dur, lag, counts, xs;
    int n_st;
    if (!PyArg_ParseTuple(args, "Oy*y*iw*w*", &handle, &dur, &lag, &n_st, &counts, &xs))
        return NULL;
    PyObject *result = NULL;
    double *end = NULL;
    int *pred = NULL;
    Prepared *p = prepared_tables(handle, &dur, &lag);
    if (p == NULL) goto done;
    if (counts.itemsize != 4 || xs.itemsize != 4 || counts.len < 4 * n_st * 4 ||
        xs.len < (n_st > 1 ? n_st - 1 : 0) * 4 || p->max_slot >= 4 * n_st ||
        p->max_lag > (n_st > 1 ? n_st - 1 : 0)) {
        PyErr_SetString(PyExc_ValueError, "kernel.critical: bad output buffers");
        goto done;
    }
    if (p->n == 0) {
        result = PyFloat_FromDouble(0.0);
        goto done;
    }
    end = PyMem_Malloc((size_t)(p->n + 1) * sizeof(double) + (size_t)p->pp * sizeof(double));
    pred = PyMem_Malloc((size_t)(2 * p->n + p->pp) * sizeof(int));
    if (end == NULL || pred == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int *pred_lag = pred + p->n, *last = pred + 2 * p->n;
    prepared_longest(p, (const double *)dur.buf, (const double *)lag.buf, end, end + p->n + 1,
                     last, NULL, pred, pred_lag);
    Py_ssize_t cur = 0;
    for (Py_ssize_t i = 1; i < p->n; i++)
        if (end[i] > end[cur]) cur = i;
    double top = end[cur];
    int *c = (int *)counts.buf, *x = (int *)xs.buf;
    while (cur >= 0) {
        c[p->ops[6 * cur + 1]] += 1;
        if (pred_lag[cur] > 0) x[pred_lag[cur] - 1] += 1;
        cur = pred[cur];
    }
    result = PyFloat_FromDouble(top);
done:
    PyMem_Free(end);
    PyMem_Free(pred);
    PyBuffer_Release(&dur);
    PyBuffer_Release(&lag);
    PyBuffer_Release(&counts);
    PyBuffer_Release(&xs);
    return result;
}

/* A Pareto front of int vectors (planner/schedules/inflight.py: _front's maximal vectors),
 * kept as vectors arrive: one covered by a kept vector (>= everywhere) is dropped, one that
 * covers kept vectors replaces them. Each vector carries a tag (the W's stage for the plain
 * points: the first action with that vector, as dict.setdefault keeps it). */
/* Grow *v (cap ints allocated) to hold at least `need` ints: from `first`, doubling. */
static int grow_ints(int **v, Py_ssize_t *cap, Py_ssize_t need, Py_ssize_t first) {
    if (need <= *cap) return 0;
    Py_ssize_t c = *cap ? 2 * *cap : first;
    while (c < need) c *= 2;
    int *grown = PyMem_Realloc(*v, (size_t)c * sizeof(int));
    if (grown == NULL) return -1;
    *v = grown;
    *cap = c;
    return 0;
}

typedef struct {
    int *v; /* (tag, counts[width]) per vector */
    Py_ssize_t len, cap; /* vectors held, ints allocated */
} Front;

static int front_add(Front *f, const int *held, int width, int tag) {
    int rec = width + 1;
    for (Py_ssize_t k = 0; k < f->len; k++) {
        const int *q = f->v + k * rec + 1;
        int covers = 1;
        for (int j = 0; j < width && covers; j++) covers = q[j] >= held[j];
        if (covers) return 0;
    }
    Py_ssize_t kept = 0;
    for (Py_ssize_t k = 0; k < f->len; k++) {
        const int *q = f->v + k * rec + 1;
        int below = 1;
        for (int j = 0; j < width && below; j++) below = q[j] <= held[j];
        if (!below) {
            if (kept != k) memmove(f->v + kept * rec, f->v + k * rec, (size_t)rec * sizeof(int));
            kept++;
        }
    }
    f->len = kept;
    /* cap counts ints: ranks differ in width */
    if (grow_ints(&f->v, &f->cap, (f->len + 1) * rec, 8 * rec) < 0) return -1;
    int *slot = f->v + f->len * rec;
    slot[0] = tag;
    memcpy(slot + 1, held, (size_t)width * sizeof(int));
    f->len++;
    return 0;
}

/* ---- A rank's undominated points from its fronts (planner/schedules/inflight.py:
 * _undominated with maximal fronts, the same selection): per class its front's vectors (one
 * chunk: the largest; two: the upper convex hull of the front; more: all), the last stage's F
 * vectors not covered by that stage's backward ones, the W vectors not covered by any kept
 * one; all sorted by _point_order (most held first, then stage, phase W < F < B, counts). */

enum { PH_W = 0, PH_F = 1, PH_B = 2 }; /* inflight._PHASE_ORDER */

typedef struct {
    int *v; /* (stage, phase, counts[width]) per point */
    Py_ssize_t len, cap;
    int width;
    int *order; /* rank_points' sorted order of the points */
} Points;

static int points_add(Points *p, int stage, int phase, const int *counts) {
    int rec = p->width + 2;
    if (grow_ints(&p->v, &p->cap, (p->len + 1) * rec, 16 * rec) < 0) return -1;
    int *q = p->v + p->len * rec;
    q[0] = stage;
    q[1] = phase;
    memcpy(q + 2, counts, (size_t)p->width * sizeof(int));
    p->len++;
    return 0;
}

/* Whether some kept point's counts (points from..to of p) are >= v everywhere. */
static int points_cover(const Points *p, Py_ssize_t from, Py_ssize_t to, const int *v) {
    int rec = p->width + 2;
    for (Py_ssize_t k = from; k < to; k++) {
        const int *q = p->v + k * rec + 2;
        int covers = 1;
        for (int j = 0; j < p->width && covers; j++) covers = q[j] >= v[j];
        if (covers) return 1;
    }
    return 0;
}

/* A stable merge sort of n indices under cmp(ctx, a, b) < 0 for a before b. */
typedef int (*IndexCmp)(const void *ctx, int a, int b);

static void merge_sort(int *idx, int *tmp, Py_ssize_t n, IndexCmp cmp, const void *ctx) {
    if (n < 2) return;
    Py_ssize_t h = n / 2;
    merge_sort(idx, tmp, h, cmp, ctx);
    merge_sort(idx + h, tmp, n - h, cmp, ctx);
    Py_ssize_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp(ctx, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, (size_t)n * sizeof(int));
}

typedef struct {
    const int *v;
    int rec, width;
} SortCtx;

/* Two-chunk vectors (tag, a, b), falling: a first, then b (Python's sorted(reverse=True)). */
static int cmp_falling(const void *ctx, int x, int y) {
    const SortCtx *c = ctx;
    const int *p = c->v + (Py_ssize_t)x * c->rec + 1, *q = c->v + (Py_ssize_t)y * c->rec + 1;
    if (p[0] != q[0]) return p[0] > q[0] ? -1 : 1;
    if (p[1] != q[1]) return p[1] > q[1] ? -1 : 1;
    return 0;
}

/* Points (stage, phase, counts): most held first, then stage, phase, counts (_point_order). */
static int cmp_points(const void *ctx, int x, int y) {
    const SortCtx *c = ctx;
    const int *p = c->v + (Py_ssize_t)x * c->rec, *q = c->v + (Py_ssize_t)y * c->rec;
    long tp = 0, tq = 0;
    for (int j = 0; j < c->width; j++) {
        tp += p[2 + j];
        tq += q[2 + j];
    }
    if (tp != tq) return tp > tq ? -1 : 1;
    for (int j = 0; j < c->width + 2; j++)
        if (p[j] != q[j]) return p[j] < q[j] ? -1 : 1;
    return 0;
}

/* The vectors _front keeps of a maximal front f, as indices into f (into `keep`, which has
 * room for f->len), their count returned; -1 on allocation failure. */
static Py_ssize_t front_keep(const Front *f, int width, int *keep) {
    if (f->len == 0) return 0;
    int rec = width + 1;
    if (width == 1) {
        int best = 0;
        for (Py_ssize_t k = 1; k < f->len; k++)
            if (f->v[k * rec + 1] > f->v[best * rec + 1]) best = (int)k;
        keep[0] = best;
        return 1;
    }
    if (width > 2) {
        for (Py_ssize_t k = 0; k < f->len; k++) keep[k] = (int)k;
        return f->len;
    }
    int *order = PyMem_Malloc((size_t)f->len * 2 * sizeof(int));
    if (order == NULL) return -1;
    for (Py_ssize_t k = 0; k < f->len; k++) order[k] = (int)k;
    SortCtx ctx = {f->v, rec, width};
    merge_sort(order, order + f->len, f->len, cmp_falling, &ctx);
    Py_ssize_t kept = 0; /* first count falling; kept when its second beats all before it */
    for (Py_ssize_t k = 0; k < f->len; k++) {
        const int *v = f->v + (Py_ssize_t)order[k] * rec + 1;
        if (kept == 0 || v[1] > f->v[(Py_ssize_t)order[kept - 1] * rec + 2])
            order[kept++] = order[k];
    }
    Py_ssize_t n_hull = 0; /* _upper_hull: first count rising */
    for (Py_ssize_t k = kept - 1; k >= 0; k--) {
        const int *pt = f->v + (Py_ssize_t)order[k] * rec + 1;
        while (n_hull >= 2) {
            const int *o = f->v + (Py_ssize_t)keep[n_hull - 2] * rec + 1;
            const int *a = f->v + (Py_ssize_t)keep[n_hull - 1] * rec + 1;
            long long cross = (long long)(a[0] - o[0]) * (pt[1] - o[1]) -
                              (long long)(a[1] - o[1]) * (pt[0] - o[0]);
            if (cross < 0) break;
            n_hull--;
        }
        keep[n_hull++] = order[k];
    }
    PyMem_Free(order);
    return n_hull;
}

/* A rank's points (comment above) from its walk's fronts: fronts[0..width) its stages'
 * backward fronts, fronts[width] the last stage's F front, fronts[width + 1] the W front
 * (tag: the W's stage). Appended to pts; -1 on allocation failure. */
static int rank_points(const Front *fronts, int width, const int *stages, int last,
                       Points *pts) {
    int rc = -1, rec = width + 1;
    Py_ssize_t most = 1;
    for (int k = 0; k < width + 2; k++)
        if (fronts[k].len > most) most = fronts[k].len;
    int *keep = PyMem_Malloc((size_t)most * sizeof(int));
    int *order = NULL;
    if (keep == NULL) goto out;
    pts->len = 0;
    pts->width = width;
    for (int j = 0; j < width; j++) {
        Py_ssize_t start = pts->len, n = front_keep(fronts + j, width, keep);
        if (n < 0) goto out;
        for (Py_ssize_t k = 0; k < n; k++)
            if (points_add(pts, stages[j], PH_B, fronts[j].v + (Py_ssize_t)keep[k] * rec + 1) < 0)
                goto out;
        if (stages[j] == last) {
            Py_ssize_t end = pts->len;
            n = front_keep(fronts + width, width, keep);
            if (n < 0) goto out;
            for (Py_ssize_t k = 0; k < n; k++) {
                const int *v = fronts[width].v + (Py_ssize_t)keep[k] * rec + 1;
                if (!points_cover(pts, start, end, v) && points_add(pts, last, PH_F, v) < 0)
                    goto out;
            }
        }
    }
    Py_ssize_t end = pts->len, n = front_keep(fronts + width + 1, width, keep);
    if (n < 0) goto out;
    for (Py_ssize_t k = 0; k < n; k++) {
        const int *tv = fronts[width + 1].v + (Py_ssize_t)keep[k] * rec;
        if (!points_cover(pts, 0, end, tv + 1) && points_add(pts, tv[0], PH_W, tv + 1) < 0)
            goto out;
    }
    order = PyMem_Malloc((size_t)(pts->len > 0 ? 2 * pts->len : 1) * sizeof(int));
    if (order == NULL) goto out;
    for (Py_ssize_t k = 0; k < pts->len; k++) order[k] = (int)k;
    SortCtx ctx = {pts->v, width + 2, width};
    merge_sort(order, order + pts->len, pts->len, cmp_points, &ctx);
    pts->order = order;
    order = NULL;
    rc = 0;
out:
    PyMem_Free(keep);
    PyMem_Free(order);
    return rc;
}

/* held_points(codes, offsets, pp, num_stages, stage_rank) -> bytes of int32: each rank's
 * undominated held points (planner/schedules/inflight.py: _walk). The walk: held counts per
 * chunk while each action runs, +1 at F, -1 after a B or W; per rank the front of each of its
 * stages' backward (B, I) vectors, of the last stage's F vectors and of the W vectors (with
 * the first W's stage), kept as the actions arrive (front_add); then rank_points' selection
 * and order. Per rank: the points' count, then (stage, phase, counts) per point. A rank
 * running a stage it does not hold raises. */
static PyObject *held_points(PyObject *self, PyObject *args) {
    Py_buffer codes, offsets, ranks;
    int pp, n_st;
    if (!PyArg_ParseTuple(args, "y*y*iiy*", &codes, &offsets, &pp, &n_st, &ranks)) return NULL;
    PyObject *result = NULL;
    Points pts = {NULL, 0, 0, 0, NULL};
    int *slot = NULL, *held = NULL, *out = NULL, *stages = NULL;
    Front *fronts = NULL;
    int n_fronts = 0;
    Py_ssize_t out_len = 0, out_cap = 0;
    const int *c = (const int *)codes.buf, *off = (const int *)offsets.buf;
    const int *rank_of = (const int *)ranks.buf;
    Py_ssize_t n = codes.len / 12;
    if (codes.itemsize != 4 || codes.len % 12 != 0 || offsets.itemsize != 4 ||
        offsets.len != 4 * (Py_ssize_t)(pp + 1) || ranks.itemsize != 4 ||
        ranks.len != 4 * (Py_ssize_t)n_st || pp < 1 || n_st < 1) {
        PyErr_SetString(PyExc_ValueError, "kernel.held_points: tables of the wrong size");
        goto done;
    }
    for (int r = 0; r <= pp; r++) {
        if (off[r] < 0 || off[r] > n || (r > 0 && off[r] < off[r - 1])) {
            PyErr_SetString(PyExc_ValueError, "kernel.held_points: offsets out of range");
            goto done;
        }
    }
    for (int s = 0; s < n_st; s++) {
        if (rank_of[s] < 0 || rank_of[s] >= pp) {
            PyErr_Format(PyExc_ValueError, "kernel.held_points: stage %d on no rank", s);
            goto done;
        }
    }
    slot = PyMem_Malloc((size_t)n_st * sizeof(int));
    held = PyMem_Malloc((size_t)n_st * sizeof(int));
    stages = PyMem_Malloc((size_t)n_st * sizeof(int));
    fronts = PyMem_Calloc((size_t)n_st + 2, sizeof(Front));
    if (slot == NULL || held == NULL || stages == NULL || fronts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    n_fronts = n_st + 2;
    int last = n_st - 1;
    for (int r = 0; r < pp; r++) {
        int width = 0;
        for (int s = 0; s < n_st; s++) {
            slot[s] = -1;
            if (rank_of[s] == r) {
                stages[width] = s;
                slot[s] = width++;
            }
        }
        for (int j = 0; j < width; j++) held[j] = 0;
        for (int k = 0; k < width + 2; k++) fronts[k].len = 0;
        Front *loss = fronts + width, *plain = fronts + width + 1;
        for (Py_ssize_t i = off[r]; i < off[r + 1]; i++) {
            int stage = c[3 * i], kind = c[3 * i + 1];
            if (stage < 0 || stage >= n_st || slot[stage] < 0 || kind < 0 || kind > 3) {
                PyErr_Format(PyExc_ValueError,
                             "kernel.held_points: rank %d runs stage %d (kind %d)", r, stage,
                             kind);
                goto done;
            }
            int j = slot[stage], rc = 0;
            if (kind == 0) { /* F */
                held[j] += 1;
                if (stage == last) rc = front_add(loss, held, width, -1);
            } else if (kind == 3) { /* W */
                rc = front_add(plain, held, width, stage);
                held[j] -= 1;
            } else { /* B or I: a backward; B releases, I does not */
                rc = front_add(fronts + j, held, width, -1);
                if (kind == 1) held[j] -= 1;
            }
            if (rc < 0) {
                PyErr_NoMemory();
                goto done;
            }
        }
        PyMem_Free(pts.order);
        pts.order = NULL;
        if (rank_points(fronts, width, stages, last, &pts) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        Py_ssize_t need = 1 + pts.len * (width + 2);
        if (grow_ints(&out, &out_cap, out_len + need, 64) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        out[out_len++] = (int)pts.len;
        for (Py_ssize_t k = 0; k < pts.len; k++) {
            memcpy(out + out_len, pts.v + (Py_ssize_t)pts.order[k] * (width + 2),
                   (size_t)(width + 2) * sizeof(int));
            out_len += width + 2;
        }
    }
    result = PyBytes_FromStringAndSize((const char *)out, out_len * (Py_ssize_t)sizeof(int));
done:
    PyMem_Free(pts.v);
    PyMem_Free(pts.order);
    for (int k = 0; k < n_fronts; k++) PyMem_Free(fronts[k].v);
    PyMem_Free(fronts);
    PyMem_Free(slot);
    PyMem_Free(held);
    PyMem_Free(stages);
    PyMem_Free(out);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&ranks);
    return result;
}

/* build(codes, offsets, pp, num_stages, m, rank_of, ops_out, pos_out, peak_out) -> status.
 *
 * Compiles a schedule: codes are int32 triples (stage, kind 0..3 = F B I W, micro-batch) of
 * every rank's actions in order, rank r's at triples offsets[r] .. offsets[r + 1]. Writes the
 * rows (layout above) in a topological order, each action's topological position (in the
 * input's order) and each stage's peak in-flight micro-batches (+1 at F, -1 at B or W).
 * Returns 0, 1 (an action out of range or on a rank that does not hold its stage) or 2 (the
 * orders deadlock). The same walk as planner/schedules/kernel.py: build_python: ranks run
 * until blocked, a stack of runnable ranks, a blocked rank resumes when the action it waits
 * on is placed (ranks waiting on one action resume in the order they blocked). */
static PyObject *build(PyObject *self, PyObject *args) {
    Py_buffer codes, offsets, rank_of, ops_out, pos_out, peak_out;
    int pp, n_st, m;
    if (!PyArg_ParseTuple(args, "y*y*iiiy*w*w*w*", &codes, &offsets, &pp, &n_st, &m, &rank_of,
                          &ops_out, &pos_out, &peak_out))
        return NULL;
    PyObject *result = NULL;
    int *position = NULL, *key_of = NULL, *pointer = NULL, *stack = NULL, *wait_head = NULL,
        *wait_tail = NULL, *next_wait = NULL, *held = NULL;
    unsigned char *present = NULL;
    Py_ssize_t n = codes.len / 12;
    const int *code = (const int *)codes.buf, *off = (const int *)offsets.buf,
              *rof = (const int *)rank_of.buf;
    if (codes.itemsize != 4 || offsets.itemsize != 4 || rank_of.itemsize != 4 ||
        codes.len % 12 != 0 || pp <= 0 || n_st <= 0 || m <= 0 ||
        offsets.len < (Py_ssize_t)(pp + 1) * 4 || rank_of.len < (Py_ssize_t)n_st * 4 ||
        ops_out.len < n * 24 || pos_out.len < n * 4 || peak_out.len < (Py_ssize_t)n_st * 4 ||
        off[0] != 0 || off[pp] != n) {
        PyErr_SetString(PyExc_ValueError, "kernel.build: bad buffers");
        goto done;
    }
    for (int r = 0; r < pp; r++)
        if (off[r + 1] < off[r]) {
            PyErr_SetString(PyExc_ValueError, "kernel.build: offsets must not decrease");
            goto done;
        }
    Py_ssize_t size = (Py_ssize_t)n_st * 4 * m;
    present = calloc((size_t)size, 1);
    position = malloc((size_t)size * sizeof(int));
    key_of = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    pointer = malloc((size_t)pp * sizeof(int));
    stack = malloc((size_t)pp * sizeof(int));
    wait_head = malloc((size_t)size * sizeof(int));
    wait_tail = malloc((size_t)size * sizeof(int));
    next_wait = malloc((size_t)pp * sizeof(int));
    held = calloc((size_t)n_st, sizeof(int));
    if (!present || !position || !key_of || !pointer || !stack || !wait_head || !wait_tail ||
        !next_wait || !held) {
        PyErr_NoMemory();
        goto done;
    }
    int *peak = (int *)peak_out.buf;
    for (int s = 0; s < n_st; s++) peak[s] = 0;
    for (int r = 0; r < pp; r++) {
        for (int j = off[r]; j < off[r + 1]; j++) {
            int stage = code[3 * j], kind = code[3 * j + 1], mb = code[3 * j + 2];
            if (stage < 0 || stage >= n_st || kind < 0 || kind > 3 || mb < 0 || mb >= m ||
                rof[stage] != r) {
                result = PyLong_FromLong(1);
                goto done;
            }
            int k = (stage * 4 + kind) * m + mb;
            present[k] = 1;
            key_of[j] = k;
            if (kind == 0) {
                if (++held[stage] > peak[stage]) peak[stage] = held[stage];
            } else if (kind != 2) {
                held[stage] -= 1;
            }
        }
    }
    for (Py_ssize_t k = 0; k < size; k++) position[k] = wait_head[k] = -1;
    int top = 0;
    for (int r = 0; r < pp; r++) {
        pointer[r] = off[r];
        stack[top++] = r;
    }
    int *ops = (int *)ops_out.buf, *pos = (int *)pos_out.buf;
    int placed = 0, last = n_st - 1;
    while (top > 0) {
        int rank = stack[--top];
        while (pointer[rank] < off[rank + 1]) {
            int j = pointer[rank], k = key_of[j];
            int stage = code[3 * j], kind = code[3 * j + 1], mb = code[3 * j + 2];
            int d1 = -1, d2 = -1, l1 = 0, l2 = 0;
            if (kind == 0) {
                if (stage > 0) {
                    d1 = ((stage - 1) * 4) * m + mb;
                    l1 = rof[stage - 1] != rank ? stage : 0;
                }
            } else if (kind == 3) {
                d1 = (stage * 4 + 2) * m + mb;
            } else {
                d1 = (stage * 4) * m + mb;
                if (stage < last) {
                    d2 = ((stage + 1) * 4 + 2) * m + mb;
                    if (!present[d2]) d2 -= m; /* the next stage runs a full B, not I */
                    l2 = rof[stage + 1] != rank ? stage + 1 : 0;
                }
            }
            int blocked = -1;
            if (d1 >= 0 && position[d1] < 0)
                blocked = d1;
            else if (d2 >= 0 && position[d2] < 0)
                blocked = d2;
            if (blocked >= 0) {
                next_wait[rank] = -1;
                if (wait_head[blocked] < 0)
                    wait_head[blocked] = rank;
                else
                    next_wait[wait_tail[blocked]] = rank;
                wait_tail[blocked] = rank;
                break;
            }
            position[k] = placed;
            pos[j] = placed;
            int *o = ops + 6 * placed;
            o[0] = rank;
            o[1] = kind * n_st + stage;
            o[2] = d1 >= 0 ? position[d1] : -1;
            o[3] = l1;
            o[4] = d2 >= 0 ? position[d2] : -1;
            o[5] = l2;
            placed++;
            for (int w = wait_head[k]; w >= 0; w = next_wait[w]) stack[top++] = w;
            wait_head[k] = -1;
            pointer[rank]++;
        }
    }
    result = PyLong_FromLong(placed == n ? 0 : 2);
done:
    free(present);
    free(position);
    free(key_of);
    free(pointer);
    free(stack);
    free(wait_head);
    free(wait_tail);
    free(next_wait);
    free(held);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&rank_of);
    PyBuffer_Release(&ops_out);
    PyBuffer_Release(&pos_out);
    PyBuffer_Release(&peak_out);
    return result;
}

/* seed_paths(ops, pp, num_stages, out) -> count: the search's seed paths of a compiled
 * schedule (planner/search/paths.py: rank_chain and through_rank_paths, the same walks).
 * Each path as int32 visit counts per duration slot (4 x num_stages, kind-major) then per
 * boundary (num_stages - 1). Written to `out`: every rank's chain (its actions' slots, no
 * boundary), then for each rank with actions, in rank order, its two fill/drain paths (the
 * whole rank, then without its trailing W actions): `count` of them. A rank's actions are
 * its rows in row order (build places each rank's actions in the rank's order). The fill
 * follows each action's first dependency across a boundary (dep 1 before dep 2) back to the
 * start; the drain follows, from the rank's last (or last non-W) action, each action's first
 * B/I dependent across a boundary (row order, dep 1 before dep 2). */
static PyObject *seed_paths(PyObject *self, PyObject *args) {
    Py_buffer ops_buf, out_buf;
    int pp, n_st;
    if (!PyArg_ParseTuple(args, "y*iiw*", &ops_buf, &pp, &n_st, &out_buf)) return NULL;
    PyObject *result = NULL;
    int *first = NULL, *prev = NULL, *drain_to = NULL;
    Py_ssize_t n = ops_buf.len / 24;
    Py_ssize_t slots = 4 * (Py_ssize_t)n_st, nb = n_st > 1 ? n_st - 1 : 0, rec = slots + nb;
    if (ops_buf.itemsize != 4 || ops_buf.len % 24 != 0 || out_buf.itemsize != 4 || pp < 1 ||
        n_st < 1 || n > INT_MAX - 1 ||
        out_buf.len < 4 * ((Py_ssize_t)pp * slots + 2 * (Py_ssize_t)pp * rec)) {
        PyErr_SetString(PyExc_ValueError, "kernel.seed_paths: tables of the wrong size");
        goto done;
    }
    const int *ops = (const int *)ops_buf.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int *o = ops + 6 * i;
        if (o[0] < 0 || o[0] >= pp || o[1] < 0 || o[1] >= slots || o[2] < -1 || o[2] >= i ||
            o[4] < -1 || o[4] >= i || o[3] < 0 || o[3] > nb || o[5] < 0 || o[5] > nb) {
            PyErr_Format(PyExc_ValueError, "kernel.seed_paths: op %zd out of range", i);
            goto done;
        }
    }
    first = PyMem_Malloc((size_t)(2 * pp) * sizeof(int));     /* first, then last row */
    prev = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(int)); /* the rank's previous row */
    drain_to = PyMem_Malloc((size_t)(n > 0 ? 2 * n : 1) * sizeof(int)); /* row, boundary */
    if (first == NULL || prev == NULL || drain_to == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int *last = first + pp;
    int *out = (int *)out_buf.buf;
    memset(out, 0, (size_t)pp * (size_t)slots * sizeof(int));
    for (int r = 0; r < pp; r++) first[r] = last[r] = -1;
    for (Py_ssize_t i = 0; i < 2 * n; i++) drain_to[i] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int *o = ops + 6 * i;
        int r = o[0];
        out[(Py_ssize_t)r * slots + o[1]] += 1;
        prev[i] = last[r];
        if (first[r] < 0) first[r] = (int)i;
        last[r] = (int)i;
        if (o[1] >= n_st && o[1] < 3 * n_st) { /* a B or I */
            if (o[2] >= 0 && o[3] > 0 && drain_to[2 * o[2]] < 0) {
                drain_to[2 * o[2]] = (int)i;
                drain_to[2 * o[2] + 1] = o[3] - 1;
            }
            if (o[4] >= 0 && o[5] > 0 && drain_to[2 * o[4]] < 0) {
                drain_to[2 * o[4]] = (int)i;
                drain_to[2 * o[4] + 1] = o[5] - 1;
            }
        }
    }
    int *paths = out + (Py_ssize_t)pp * slots;
    Py_ssize_t count = 0;
    for (int r = 0; r < pp; r++) {
        if (first[r] < 0) continue;
        int *a = paths + count * rec, *b = a + rec;
        memset(a, 0, (size_t)rec * sizeof(int));
        int cur = first[r];
        for (;;) { /* fill */
            const int *o = ops + 6 * (Py_ssize_t)cur;
            int boundary;
            if (o[2] >= 0 && o[3] > 0) {
                cur = o[2];
                boundary = o[3] - 1;
            } else if (o[4] >= 0 && o[5] > 0) {
                cur = o[4];
                boundary = o[5] - 1;
            } else {
                break;
            }
            a[ops[6 * (Py_ssize_t)cur + 1]] += 1;
            a[slots + boundary] += 1;
        }
        const int *own = out + (Py_ssize_t)r * slots;
        for (Py_ssize_t k = 0; k < slots; k++) a[k] += own[k];
        memcpy(b, a, (size_t)rec * sizeof(int));
        int end = last[r]; /* the second variant leaves out the trailing W actions */
        while (prev[end] >= 0 && ops[6 * (Py_ssize_t)end + 1] >= 3 * n_st) {
            b[ops[6 * (Py_ssize_t)end + 1]] -= 1;
            end = prev[end];
        }
        if (ops[6 * (Py_ssize_t)end + 1] >= 3 * n_st) { /* nothing but W: keep them all */
            memcpy(b, a, (size_t)rec * sizeof(int));
            end = last[r];
        }
        int ends[2] = {last[r], end};
        int *variants[2] = {a, b};
        for (int v = 0; v < 2; v++) { /* drain */
            int *c = variants[v];
            cur = ends[v];
            while (drain_to[2 * (Py_ssize_t)cur] >= 0) {
                int boundary = drain_to[2 * (Py_ssize_t)cur + 1];
                cur = drain_to[2 * (Py_ssize_t)cur];
                c[ops[6 * (Py_ssize_t)cur + 1]] += 1;
                c[slots + boundary] += 1;
            }
        }
        count += 2;
    }
    result = PyLong_FromSsize_t(count);
done:
    PyMem_Free(first);
    PyMem_Free(prev);
    PyMem_Free(drain_to);
    PyBuffer_Release(&ops_buf);
    PyBuffer_Release(&out_buf);
    return result;
}

/* ---- Schedule generators: the orders of planner/schedules/generators.py, as codes ----
 *
 * Each rank's order as int32 triples (stage, kind, micro-batch), kinds F=0 B=1 I=2 W=3,
 * ranks one after another. The same loops as the Python generators (_gpipe, _one_f_one_b,
 * _interleaved, _zbv) emitting (stage, kind) pairs, then numbered as _numbered does: a
 * pair's n-th occurrence is micro-batch n and occurrences >= m are dropped. The orders are
 * identical to the Python ones (tests/planner/schedules/test_schedule_kernel.py). */

enum { G_GPIPE = 0, G_1F1B = 1, G_INTERLEAVED = 2, G_ZBH1 = 3, G_ZBV = 4 };

typedef struct {
    int *codes;
    Py_ssize_t len, cap;
    int *seen; /* occurrences so far per (stage, kind) of the current rank */
    int m, n_st, failed;
} Emit;

static void emit(Emit *e, int stage, int kind) {
    int *count = &e->seen[stage * 4 + kind];
    int index = (*count)++;
    if (index >= e->m || e->failed)
        return;
    if (e->len + 3 > e->cap) {
        Py_ssize_t cap = e->cap ? 2 * e->cap : 1024;
        int *grown = realloc(e->codes, (size_t)cap * sizeof(int));
        if (grown == NULL) {
            e->failed = 1;
            return;
        }
        e->codes = grown;
        e->cap = cap;
    }
    e->codes[e->len++] = stage;
    e->codes[e->len++] = kind;
    e->codes[e->len++] = index;
}

static int gen_interleaved(Emit *e, int rank, int pp, int vpp, int m, int zero_bubble) {
    int rounds = m / pp > 1 ? m / pp : 1;
    long per_round = m / rounds;
    long factor = zero_bubble ? 1 : 2;
    long total = (long)m * vpp;
    long warmup = (vpp - 1) * per_round + factor * (pp - 1 - rank);
    if (warmup > total)
        warmup = total;
    long steady = total - warmup;
    int bwd_kind = zero_bubble ? 2 : 1;
    long *backward = malloc((size_t)(total > 0 ? total : 1) * sizeof(long));
    if (backward == NULL)
        return -1;
    long n_back = 0, weights_done = 0;
#define FWD_STAGE(op) ((int)((((op) / per_round) % vpp) * pp + rank))
#define BWD_STAGE(op) ((int)((vpp - 1 - (((op) - warmup) / per_round) % vpp) * pp + rank))
    for (long op = 0; op < warmup + total; op++) {
        if (op < warmup) {
            emit(e, FWD_STAGE(op), 0);
            continue;
        }
        if (op < warmup + steady)
            emit(e, FWD_STAGE(op), 0);
        emit(e, BWD_STAGE(op), bwd_kind);
        backward[n_back++] = op;
        if (zero_bubble && op - warmup >= rank) {
            emit(e, BWD_STAGE(backward[weights_done]), 3);
            weights_done++;
        }
    }
    while (zero_bubble && weights_done < n_back) {
        emit(e, BWD_STAGE(backward[weights_done]), 3);
        weights_done++;
    }
#undef FWD_STAGE
#undef BWD_STAGE
    free(backward);
    return 0;
}

static void gen_zbv(Emit *e, int rank, int pp, int m) {
    int n = 2 * pp - 1 > m ? 2 * pp - 1 : m;
    int s0 = rank, s1 = 2 * pp - 1 - rank;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int k = 0; k < 2 * (pp - rank) - 1; k++) {
        emit(e, s0, 0);
        f0++;
    }
    for (int k = 0; k < rank; k++) {
        emit(e, s1, 0);
        f1++;
        emit(e, s0, 0);
        f0++;
    }
    for (int k = 0; k < pp - rank; k++) {
        emit(e, s1, 0);
        f1++;
        emit(e, s1, 2);
        emit(e, s1, 3);
        b1++;
    }
    while (f1 < f0 || f0 < n) {
        if (f0 < n) {
            emit(e, s0, 0);
            f0++;
        }
        emit(e, s0, 2);
        emit(e, s0, 3);
        b0++;
        emit(e, s1, 0);
        f1++;
        emit(e, s1, 2);
        emit(e, s1, 3);
        b1++;
    }
    int w0 = b0, w1 = b1;
    for (int k = 0; k < rank; k++) {
        emit(e, s0, 2);
        b0++;
        emit(e, s1, 2);
        b1++;
    }
    for (int k = 0; k < pp - rank; k++) {
        emit(e, s0, 2);
        b0++;
        emit(e, s0, 3);
        w0++;
    }
    for (int index = w1; index < b1; index++) emit(e, s1, 3);
    for (int index = w0; index < b0; index++) emit(e, s0, 3);
}

/* generate(kind, pp, vpp, m) -> (bytes of int32 codes, list of per-rank action counts) */
static PyObject *generate(PyObject *self, PyObject *args) {
    int kind, pp, vpp, m;
    if (!PyArg_ParseTuple(args, "iiii", &kind, &pp, &vpp, &m))
        return NULL;
    /* the stage indices the loops write must stay below pp * vpp (the `seen` table) */
    if (kind < 0 || kind > 4 || pp < 1 || vpp < 1 || m < 1 || (kind == G_ZBV && vpp != 2) ||
        ((kind == G_GPIPE || kind == G_1F1B) && vpp != 1)) {
        PyErr_SetString(PyExc_ValueError, "kernel.generate: bad arguments");
        return NULL;
    }
    Emit e = {NULL, 0, 0, NULL, m, pp * vpp, 0};
    e.seen = malloc((size_t)e.n_st * 4 * sizeof(int));
    PyObject *counts = PyList_New(pp);
    if (e.seen == NULL || counts == NULL) {
        free(e.seen);
        Py_XDECREF(counts);
        return PyErr_NoMemory();
    }
    for (int rank = 0; rank < pp && !e.failed; rank++) {
        Py_ssize_t before = e.len;
        for (int i = 0; i < e.n_st * 4; i++) e.seen[i] = 0;
        if (kind == G_GPIPE) {
            for (int k = 0; k < m; k++) emit(&e, rank, 0);
            for (int k = 0; k < m; k++) emit(&e, rank, 1);
        } else if (kind == G_1F1B) {
            int warmup = pp - 1 - rank < m ? pp - 1 - rank : m;
            for (int k = 0; k < warmup; k++) emit(&e, rank, 0);
            for (int k = 0; k < m - warmup; k++) {
                emit(&e, rank, 0);
                emit(&e, rank, 1);
            }
            for (int k = 0; k < warmup; k++) emit(&e, rank, 1);
        } else if (kind == G_ZBV) {
            gen_zbv(&e, rank, pp, m);
        } else if (gen_interleaved(&e, rank, pp, vpp, m, kind == G_ZBH1) < 0) {
            e.failed = 1;
        }
        PyList_SET_ITEM(counts, rank, PyLong_FromSsize_t((e.len - before) / 3));
    }
    free(e.seen);
    if (e.failed) {
        free(e.codes);
        Py_DECREF(counts);
        return PyErr_NoMemory();
    }
    PyObject *codes = PyBytes_FromStringAndSize((const char *)e.codes,
                                                (Py_ssize_t)(e.len * sizeof(int)));
    free(e.codes);
    if (codes == NULL) {
        Py_DECREF(counts);
        return NULL;
    }
    return Py_BuildValue("(NN)", codes, counts);
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS, "Start, end and busy times of a compiled schedule."},
    {"build", build, METH_VARARGS, "Compile per-rank orders into topological rows."},
    {"critical", critical, METH_VARARGS, "Makespan and one longest path's visit counts."},
    {"generate", generate, METH_VARARGS, "A schedule's per-rank orders as int32 codes."},
    {"prepare", prepare, METH_VARARGS, "Check a compiled schedule once and keep it."},
    {"makespan", makespan, METH_VARARGS, "Makespan and busy times of a prepared schedule."},
    {"critical_prepared", critical_prepared, METH_VARARGS, "critical of a prepared schedule."},
    {"held_points", held_points, METH_VARARGS, "Each rank's undominated held counts."},
    {"seed_paths", seed_paths, METH_VARARGS, "The search's seed paths of a compiled schedule."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernel", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kernel(void) { return PyModule_Create(&module); }
