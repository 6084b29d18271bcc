/* The per-layer sums and the per-rank memory peaks of planner.cost.score.score_split in C.
 *
 * The same additions, comparisons and products, in the same order, as the Python code they
 * replace (score.py: stage_sums_python, stage_recompute_bytes, rank_peaks; memory.py:
 * rank_activation_peak); IEEE doubles with no contraction (setup.py: -ffp-contract=off), so
 * the results are bit-identical (tests/planner/cost/test_cost_sums.py).
 *
 * layers: float64, LAYER_FIELDS per layer (fw, bw_input x 3 modes, bw_weight, activation
 * bytes x 3 modes, post, static bytes, p2p); kinds: one mode index (0..2) per layer; bounds:
 * int32, stages + 1 boundaries; stage_rank and inflight: int32 per stage.
 * sums out: float64, 5 per stage (fw, bw, w, p2p, activation bytes) then 2 per rank (post
 * time, memory bytes).
 *
 * score() adds each rank's activation peak over its held points. points: int32, per point
 * (stage, phase, total, counts[width of its rank]) with phase 0 = W, 1 = F, 2 = B (B and I);
 * point_ranges: int32, 2 per rank (offset of its first point in `points`, number of points);
 * rank_stages / rank_stage_offsets: the stages of each rank (planner.schedules.rank_stages),
 * flattened, pp + 1 offsets. score out: float64, 5 per stage as sums, then per rank post time,
 * static bytes, held activations, transient, fragmentation, memory (6 x pp); best: int32 per
 * rank, the index of its peak point among its points (-1: none).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define LAYER_FIELDS 11

/* Per stage fw, bw, w, p2p and activation bytes (n_st each, from o), per rank post time and
 * static bytes (post, mem: pp each), in stage_sums_python's order. */
static void stage_sums(const double *lay, const unsigned char *kind, const int *b,
                       const int *rank_of, Py_ssize_t n_st, int pp, double of, double ob,
                       double ow, double fixed, double *o, double *post, double *mem) {
    double *fw = o, *bw = o + n_st, *w = o + 2 * n_st, *p2p = o + 3 * n_st, *act = o + 4 * n_st;
    for (int r = 0; r < pp; r++) {
        post[r] = 0.0;
        mem[r] = fixed;
    }
    for (Py_ssize_t s = 0; s < n_st; s++) {
        int r = rank_of[s];
        double f = 0.0, bb = 0.0, ww = 0.0, a = 0.0;
        for (int i = b[s]; i < b[s + 1]; i++) {
            const double *l = lay + (Py_ssize_t)LAYER_FIELDS * i;
            int k = kind[i];
            f += l[0];
            bb += l[1 + k] + l[4];
            ww += l[4];
            a += l[5 + k];
            post[r] += l[8];
            mem[r] += l[9];
        }
        fw[s] = f + of;
        bw[s] = bb + ob;
        w[s] = ww + ow;
        p2p[s] = lay[(Py_ssize_t)LAYER_FIELDS * (b[s + 1] - 1) + 10];
        act[s] = a;
    }
}

/* Bounds from 0 to n, stages non-empty and on ranks in [0, pp), modes in 0..2: 0, else -1
 * with ValueError set. */
static int check_partition(const unsigned char *kind, Py_ssize_t n, const int *b,
                           const int *rank_of, Py_ssize_t n_st, int pp, const char *who) {
    if (b[0] != 0 || b[n_st] != n) {
        PyErr_Format(PyExc_ValueError, "%s: bounds must run from 0 to the layer count", who);
        return -1;
    }
    for (Py_ssize_t s = 0; s < n_st; s++) {
        if (b[s + 1] <= b[s] || rank_of[s] < 0 || rank_of[s] >= pp) {
            PyErr_Format(PyExc_ValueError, "%s: stage %zd empty or on no rank", who, s);
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (kind[i] > 2) {
            PyErr_Format(PyExc_ValueError, "%s: layer %zd has no mode %d", who, i, kind[i]);
            return -1;
        }
    }
    return 0;
}

static PyObject *sums(PyObject *self, PyObject *args) {
    Py_buffer layers, kinds, bounds, ranks, inflight, out;
    int pp;
    double of, ob, ow, fixed;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*idddd" "w*", &layers, &kinds, &bounds, &ranks,
                          &inflight, &pp, &of, &ob, &ow, &fixed, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = layers.len / (8 * LAYER_FIELDS), n_st = bounds.len / 4 - 1;
    const double *lay = (const double *)layers.buf;
    const unsigned char *kind = (const unsigned char *)kinds.buf;
    const int *b = (const int *)bounds.buf, *rank_of = (const int *)ranks.buf;
    const int *held = (const int *)inflight.buf;
    double *o = (double *)out.buf;
    if (layers.itemsize != 8 || layers.len % (8 * LAYER_FIELDS) != 0 || kinds.len != n ||
        bounds.itemsize != 4 || ranks.itemsize != 4 || inflight.itemsize != 4 || n_st < 1 ||
        ranks.len != 4 * n_st || inflight.len != 4 * n_st || pp <= 0 || out.itemsize != 8 ||
        out.len != 8 * (5 * n_st + 2 * pp)) {
        PyErr_SetString(PyExc_ValueError, "sums: tables of the wrong size or type");
        goto done;
    }
    if (check_partition(kind, n, b, rank_of, n_st, pp, "sums") < 0) goto done;
    double *act = o + 4 * n_st, *post = o + 5 * n_st, *mem = post + pp;
    stage_sums(lay, kind, b, rank_of, n_st, pp, of, ob, ow, fixed, o, post, mem);
    for (Py_ssize_t s = 0; s < n_st; s++) mem[rank_of[s]] += (double)held[s] * act[s];
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&layers);
    PyBuffer_Release(&kinds);
    PyBuffer_Release(&bounds);
    PyBuffer_Release(&ranks);
    PyBuffer_Release(&inflight);
    PyBuffer_Release(&out);
    return result;
}

/* Per stage, the recompute transient of its backward (score.py: stage_recompute_bytes): the
 * largest act(none) - act(mode) over its layers, 0 when every layer of it runs `none`. */
static void recompute_bytes(const double *lay, const unsigned char *kind, const int *b,
                            Py_ssize_t n_st, double *out) {
    for (Py_ssize_t s = 0; s < n_st; s++) {
        int any = 0;
        for (int i = b[s]; i < b[s + 1]; i++) any |= kind[i];
        out[s] = 0.0;
        if (!any) continue;
        double top = 0.0;
        for (int i = b[s]; i < b[s + 1]; i++) {
            const double *a = lay + (Py_ssize_t)LAYER_FIELDS * i + 5;
            double v = a[0] - a[kind[i]];
            if (i == b[s] || v > top) top = v;
        }
        out[s] = top;
    }
}

/* One rank's peak over its points (memory.py: rank_activation_peak, the same skip and the
 * same first-best tie rule): writes held, transient and fragmentation bytes, returns the
 * index of the peak point (-1: none). */
static int rank_peak(const int *pts, int npts, const int *stages, int width, const double *act,
                     const double *recompute, int loss_stage, double loss, double frag,
                     double *res) {
    int many = npts > 4, best = -1;
    double most = 0.0, extra_most = 0.0;
    if (many) {
        most = act[stages[0]];
        for (int j = 1; j < width; j++)
            if (act[stages[j]] > most) most = act[stages[j]];
        extra_most = loss;
        for (int j = 0; j < width; j++)
            if (recompute[stages[j]] > extra_most) extra_most = recompute[stages[j]];
    }
    double top = -1.0, held_top = 0.0, extra_top = 0.0;
    const int *p = pts;
    for (int k = 0; k < npts; k++, p += 3 + width) {
        int stage = p[0], phase = p[1];
        const int *c = p + 3;
        if (many && (double)p[2] * most + extra_most <= top) continue;
        double held;
        if (width == 1) {
            held = (double)c[0] * act[stages[0]];
        } else if (width == 2) {
            held = (double)c[0] * act[stages[0]] + (double)c[1] * act[stages[1]];
        } else {
            held = 0.0;
            for (int j = 0; j < width; j++) held += (double)c[j] * act[stages[j]];
        }
        double extra = 0.0;
        if (phase != 0) {
            extra = stage == loss_stage ? loss : 0.0;
            if (phase == 2 && recompute[stage] > extra) extra = recompute[stage];
        }
        if (held + extra > top) {
            top = held + extra;
            held_top = held;
            extra_top = extra;
            best = k;
        }
    }
    res[0] = held_top;
    res[1] = extra_top;
    res[2] = frag * (0.0 > top ? 0.0 : top);
    return best;
}

/* score(layers, kinds, bounds, stage_rank, pp, of, ob, ow, fixed, points, point_ranges,
 *       rank_stages, rank_stage_offsets, loss_stage, loss_bytes, frag, transient, out, best)
 * The sums, each rank's peak and its memory (module comment for the layouts). */
static PyObject *score(PyObject *self, PyObject *args) {
    Py_buffer layers, kinds, bounds, ranks, points, ranges, rstages, rofs, out, best;
    int pp, loss_stage, transient;
    double of, ob, ow, fixed, loss, frag;
    if (!PyArg_ParseTuple(args, "y*y*y*y*idddd" "y*y*y*y*iddp" "w*w*", &layers, &kinds,
                          &bounds, &ranks, &pp, &of, &ob, &ow, &fixed, &points, &ranges,
                          &rstages, &rofs, &loss_stage, &loss, &frag, &transient, &out, &best))
        return NULL;
    PyObject *result = NULL;
    double *recompute = NULL;
    Py_ssize_t n = layers.len / (8 * LAYER_FIELDS), n_st = bounds.len / 4 - 1;
    const double *lay = (const double *)layers.buf;
    const unsigned char *kind = (const unsigned char *)kinds.buf;
    const int *b = (const int *)bounds.buf, *rank_of = (const int *)ranks.buf;
    const int *pts = (const int *)points.buf, *rng = (const int *)ranges.buf;
    const int *rs = (const int *)rstages.buf, *ro = (const int *)rofs.buf;
    Py_ssize_t n_pts = points.len / 4, n_rs = rstages.len / 4;
    double *o = (double *)out.buf;
    int *best_of = (int *)best.buf;
    if (layers.itemsize != 8 || layers.len % (8 * LAYER_FIELDS) != 0 || kinds.len != n ||
        bounds.itemsize != 4 || ranks.itemsize != 4 || n_st < 1 || ranks.len != 4 * n_st ||
        pp <= 0 || points.itemsize != 4 || ranges.itemsize != 4 || ranges.len != 8 * pp ||
        rstages.itemsize != 4 || rofs.itemsize != 4 || rofs.len != 4 * (pp + 1) ||
        out.itemsize != 8 || out.len != 8 * (5 * n_st + 6 * pp) || best.itemsize != 4 ||
        best.len != 4 * pp) {
        PyErr_SetString(PyExc_ValueError, "score: tables of the wrong size or type");
        goto done;
    }
    if (check_partition(kind, n, b, rank_of, n_st, pp, "score") < 0) goto done;
    for (int r = 0; r < pp; r++) {
        if (ro[r] < 0 || ro[r] > ro[r + 1] || ro[r + 1] > n_rs || rng[2 * r] < 0 ||
            rng[2 * r + 1] < 0 ||
            rng[2 * r] + (Py_ssize_t)rng[2 * r + 1] * (3 + ro[r + 1] - ro[r]) > n_pts) {
            PyErr_Format(PyExc_ValueError, "score: rank %d's points or stages out of range", r);
            goto done;
        }
        for (int j = ro[r]; j < ro[r + 1]; j++) {
            if (rs[j] < 0 || rs[j] >= n_st) {
                PyErr_Format(PyExc_ValueError, "score: rank %d holds no stage %d", r, rs[j]);
                goto done;
            }
        }
        const int *p = pts + rng[2 * r];
        for (int k = 0; k < rng[2 * r + 1]; k++, p += 3 + ro[r + 1] - ro[r]) {
            if (p[0] < 0 || p[0] >= n_st || p[1] < 0 || p[1] > 2) {
                PyErr_Format(PyExc_ValueError, "score: rank %d's point %d is not valid", r, k);
                goto done;
            }
        }
    }
    recompute = PyMem_Calloc((size_t)n_st, sizeof(double));
    if (recompute == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    double *act = o + 4 * n_st, *post = o + 5 * n_st, *mem = post + pp, *peak = mem + pp;
    stage_sums(lay, kind, b, rank_of, n_st, pp, of, ob, ow, fixed, o, post, mem);
    if (transient) recompute_bytes(lay, kind, b, n_st, recompute);
    for (int r = 0; r < pp; r++) {
        double *res = peak + 3 * r, *memory = peak + 3 * pp + r;
        best_of[r] = rank_peak(pts + rng[2 * r], rng[2 * r + 1], rs + ro[r], ro[r + 1] - ro[r],
                               act, recompute, loss_stage, loss, frag, res);
        *memory = mem[r] + (res[0] + res[1] + res[2]);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(recompute);
    PyBuffer_Release(&layers);
    PyBuffer_Release(&kinds);
    PyBuffer_Release(&bounds);
    PyBuffer_Release(&ranks);
    PyBuffer_Release(&points);
    PyBuffer_Release(&ranges);
    PyBuffer_Release(&rstages);
    PyBuffer_Release(&rofs);
    PyBuffer_Release(&out);
    PyBuffer_Release(&best);
    return result;
}

static PyMethodDef methods[] = {
    {"sums", sums, METH_VARARGS, "Per-stage and per-rank sums of one partition."},
    {"score", score, METH_VARARGS, "The sums, per-rank activation peaks and memory."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sums", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sums(void) { return PyModule_Create(&module); }
