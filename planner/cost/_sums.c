/* The per-layer sums of planner.cost.score.score_split in C.
 *
 * The same additions, in the same order, as the Python loop it replaces (score_split_python);
 * IEEE doubles with no contraction (setup.py: -ffp-contract=off), so the results are
 * bit-identical (tests/planner/cost/test_cost_sums.py).
 *
 * layers: float64, LAYER_FIELDS per layer (fw, bw_input x 3 modes, bw_weight, activation
 * bytes x 3 modes, post, static bytes, p2p); kinds: one mode index (0..2) per layer; bounds:
 * int32, stages + 1 boundaries; stage_rank and inflight: int32 per stage.
 * out: float64, 5 per stage (fw, bw, w, p2p, activation bytes) then 2 per rank (post time,
 * memory bytes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define LAYER_FIELDS 11

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
    if (b[0] != 0 || b[n_st] != n) {
        PyErr_SetString(PyExc_ValueError, "sums: bounds must run from 0 to the layer count");
        goto done;
    }
    for (Py_ssize_t s = 0; s < n_st; s++) {
        if (b[s + 1] <= b[s] || rank_of[s] < 0 || rank_of[s] >= pp) {
            PyErr_Format(PyExc_ValueError, "sums: stage %zd empty or on no rank", s);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (kind[i] > 2) {
            PyErr_Format(PyExc_ValueError, "sums: layer %zd has no mode %d", i, kind[i]);
            goto done;
        }
    }
    double *fw = o, *bw = o + n_st, *w = o + 2 * n_st, *p2p = o + 3 * n_st, *act = o + 4 * n_st;
    double *post = o + 5 * n_st, *mem = post + pp;
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

static PyMethodDef methods[] = {
    {"sums", sums, METH_VARARGS, "Per-stage and per-rank sums of one partition."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sums", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sums(void) { return PyModule_Create(&module); }
