// The eager fast path of a patched op, in C++: SGLang's positional call straight to the kernel library's
// astra_launch, with no Python frame, no ctypes and no torch dispatcher in between.
//
// Why: SGLang's own ops cost 5-12 us a call from Python, and the ctypes path cost 1.05-1.34x that
// (H200, 2026-11-21, benchmarks/per_call.py; rows: `git show 1a07363:benchmarks/results/2026-11-21-h200-s3/
// final/per_call.jsonl`); this path does in C++ what
// PatchedOp._core does in Python for the common case (known shape, verdict cached, verification off).
// A keyword call (SGLang's rope passes every argument by name) is bound to spec order in Python by its call
// form's plan and handed over with `bound`: 6.2 -> 1.8 us a rope call (CPU, benchmarks/launcher_overhead.py).
// Anything else returns the MISS sentinel and the Python path handles the call exactly as before: unknown
// shapes (Python computes the coverage verdict and hands it back with `remember`), non-tensors,
// ASTRA_UNSUPPORTED, launch errors (`last_error` set, the op deactivated, Python disables it with a reason).
// A shape whose verdict is DEFERRED (the manifest leaves it to SGLang's kernel) calls the original from here
// with the caller's arguments, so keeping SGLang's kernel costs no Python frame either.
//
// Built by astra_sglang/patching/fastcall.py against the running torch. No c10_cuda: the current stream
// comes from torch._C._cuda_getCurrentRawStream (~0.1 us from C), so one build serves CUDA and the CPU
// tests (no stream function: CPU tensors, null stream, a C stand-in kernel library).
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <unordered_map>
#include <vector>

#include "astra_abi.h"

namespace {

constexpr int kMaxArgs = 16;
constexpr int kKeyWords = 2 + 2 * ASTRA_MAX_DIMS + 1;  // dtype, ndim, sizes, strides, device per tensor
using LaunchFn = int (*)(const AstraTensor*, int, const double*, int, cudaStream_t);

// An output's dim from an input's: out = (in.size(dim) - bf) / af * ae + be (spec dims are affine: "2*d").
struct DimRule {
  int src, dim;
  int64_t af, bf, ae, be;
};

struct Arg {
  char kind;     // 't' tensor argument, 'o' output (allocated when not given), 's' scalar
  int like;      // 'o': spec index of the input it is shaped and typed like (empty_like), or -1: then
  int ndims;     //   `rules` give its dims (contiguous) and dtype_src its dtype (-1: float32);
  int dtype_src; //   ndims -1: no rule either, the Python path allocates
  DimRule rules[ASTRA_MAX_DIMS];
  int has_default;
  double value;  // 's': default
};

// (shape, strides, dtype, device) of every tensor argument -> coverage verdict, filled by Python.
constexpr int kUncovered = 0, kCovered = 1, kDeferred = 2;  // patching/patched_op.py: UNCOVERED, COVERED, DEFERRED
struct Verdicts {
  std::unordered_map<uint64_t, std::vector<std::pair<std::vector<int64_t>, int>>> table;
  std::vector<int64_t> last;
  int last_ok = -1;
};

struct FastOp {
  PyObject_HEAD
  LaunchFn fn;
  int n, nt, ns, active, last_error, cuda;
  PyObject* stream_fn;  // device index -> raw stream (int); None: CPU tensors, null stream
  PyObject* original;   // serves DEFERRED shapes; None: they return MISS
  Arg args[kMaxArgs];
  unsigned long long calls;     // each one launched the kernel
  unsigned long long deferred;  // each one called the original
  Verdicts* verdicts;
};

PyObject* g_miss = nullptr;  // the MISS sentinel

int dtype_code(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return ASTRA_FLOAT32;
    case c10::ScalarType::Half: return ASTRA_FLOAT16;
    case c10::ScalarType::BFloat16: return ASTRA_BFLOAT16;
    case c10::ScalarType::Int: return ASTRA_INT32;
    case c10::ScalarType::Long: return ASTRA_INT64;
    case c10::ScalarType::Byte: return ASTRA_UINT8;
    case c10::ScalarType::Bool: return ASTRA_BOOL;
    case c10::ScalarType::Float8_e4m3fn: return ASTRA_FLOAT8_E4M3;
    case c10::ScalarType::Float8_e5m2: return ASTRA_FLOAT8_E5M2;
    case c10::ScalarType::Char: return ASTRA_INT8;
    case c10::ScalarType::Double: return ASTRA_FLOAT64;
    default: return -1;
  }
}

// Appends one tensor's key words; false when the tensor cannot be described (rank, dtype, device kind).
bool key_of(const at::Tensor& t, bool cuda, int64_t* key) {
  const int code = dtype_code(t.scalar_type());
  const int64_t nd = t.dim();
  if (code < 0 || nd > ASTRA_MAX_DIMS || (cuda ? !t.is_cuda() : !t.is_cpu())) return false;
  key[0] = code;
  key[1] = nd;
  for (int64_t i = 0; i < ASTRA_MAX_DIMS; ++i) {
    key[2 + i] = i < nd ? t.size(i) : 0;
    key[2 + ASTRA_MAX_DIMS + i] = i < nd ? t.stride(i) : 0;
  }
  key[kKeyWords - 1] = t.get_device();
  return true;
}

uint64_t hash_key(const int64_t* key, int words) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (int i = 0; i < words; ++i) h = (h ^ (uint64_t)key[i]) * 1099511628211ull;
  return h;
}

// kCovered, kUncovered, kDeferred, or -1 unknown (ask Python).
int lookup(Verdicts* v, const int64_t* key, int words) {
  if (v->last_ok >= 0 && (int)v->last.size() == words && std::memcmp(v->last.data(), key, words * 8) == 0)
    return v->last_ok;
  auto it = v->table.find(hash_key(key, words));
  if (it == v->table.end()) return -1;
  for (auto& entry : it->second)
    if ((int)entry.first.size() == words && std::memcmp(entry.first.data(), key, words * 8) == 0) {
      v->last.assign(key, key + words);
      v->last_ok = entry.second;
      return entry.second;
    }
  return -1;
}

PyObject* miss() {
  Py_INCREF(g_miss);
  return g_miss;
}

// `args`: the call's arguments in spec order; `caller_args` / `caller_kwargs`: the caller's own call, which a
// DEFERRED shape hands to the original (the same objects for a positional call).
PyObject* call_impl(PyObject* self_obj, PyObject* args, PyObject* caller_args, PyObject* caller_kwargs) {
  FastOp* self = reinterpret_cast<FastOp*>(self_obj);
  if (!self->active) return miss();
  const Py_ssize_t given = PyTuple_GET_SIZE(args);
  if (given > self->n) return miss();
  at::Tensor tensors[kMaxArgs];
  int tslot[kMaxArgs];  // spec index -> tensor position
  double scalars[kMaxArgs];
  int nt = 0, ns = 0;
  for (int i = 0; i < self->n; ++i) {
    PyObject* o = i < given ? PyTuple_GET_ITEM(args, i) : nullptr;
    const Arg& a = self->args[i];
    if (a.kind == 's') {
      if (o == nullptr || o == Py_None) {
        if (!a.has_default) return miss();
        scalars[ns++] = a.value;
      } else if (PyFloat_CheckExact(o)) {
        scalars[ns++] = PyFloat_AS_DOUBLE(o);
      } else if (PyLong_Check(o)) {
        scalars[ns++] = PyLong_AsDouble(o);
        if (PyErr_Occurred()) { PyErr_Clear(); return miss(); }
      } else {
        return miss();
      }
      continue;
    }
    tslot[i] = nt++;
    if (o != nullptr && o != Py_None) {
      if (!THPVariable_Check(o)) return miss();
      tensors[tslot[i]] = THPVariable_Unpack(o);
    } else if (a.kind != 'o' || (a.like < 0 && a.ndims < 0)) {
      return miss();
    }
  }
  for (int i = 0; i < self->n; ++i) {  // outputs not given: allocated as the Python path does
    const Arg& a = self->args[i];
    if (a.kind != 'o' || tensors[tslot[i]].defined()) continue;
    if (a.like >= 0) {
      tensors[tslot[i]] = at::empty_like(tensors[tslot[a.like]]);
      continue;
    }
    int64_t sizes[ASTRA_MAX_DIMS];
    for (int k = 0; k < a.ndims; ++k) {
      const DimRule& r = a.rules[k];
      const at::Tensor& src = tensors[tslot[r.src]];
      if (r.dim >= src.dim() || (src.size(r.dim) - r.bf) % r.af != 0) return miss();
      sizes[k] = (src.size(r.dim) - r.bf) / r.af * r.ae + r.be;
    }
    const at::Tensor& first = tensors[tslot[a.rules[0].src]];
    const auto dtype = a.dtype_src < 0 ? c10::ScalarType::Float : tensors[tslot[a.dtype_src]].scalar_type();
    tensors[tslot[i]] = at::empty(c10::IntArrayRef(sizes, a.ndims), first.options().dtype(dtype));
  }
  int64_t key[kMaxArgs * kKeyWords];
  for (int j = 0; j < nt; ++j)
    if (!key_of(tensors[j], self->cuda, key + j * kKeyWords)) return miss();
  const int verdict = lookup(self->verdicts, key, nt * kKeyWords);
  // Outputs the caller did not pass were allocated above, for the key; the original allocates its own (one
  // caching-allocator round trip wasted per deferred call, on shapes of 12 MB and more).
  if (verdict == kDeferred && self->original != nullptr && self->original != Py_None) {
    self->deferred++;
    return PyObject_Call(self->original, caller_args, caller_kwargs);  // its exceptions propagate, as SGLang's
  }
  if (verdict != kCovered) return miss();
  AstraTensor desc[kMaxArgs];
  for (int j = 0; j < nt; ++j) {
    const int64_t* k = key + j * kKeyWords;
    desc[j].data = tensors[j].data_ptr();
    desc[j].dtype = (int32_t)k[0];
    desc[j].ndim = (int32_t)k[1];
    std::memcpy(desc[j].shape, k + 2, sizeof(desc[j].shape));
    std::memcpy(desc[j].stride, k + 2 + ASTRA_MAX_DIMS, sizeof(desc[j].stride));
  }
  cudaStream_t stream = nullptr;
  if (self->cuda) {
    PyObject* device = PyLong_FromLong(tensors[0].get_device());
    PyObject* raw = device ? PyObject_CallOneArg(self->stream_fn, device) : nullptr;
    Py_XDECREF(device);
    stream = raw ? reinterpret_cast<cudaStream_t>(PyLong_AsVoidPtr(raw)) : nullptr;
    Py_XDECREF(raw);
    if (PyErr_Occurred()) { PyErr_Clear(); return miss(); }
  }
  const int rc = self->fn(desc, nt, scalars, ns, stream);
  if (rc != ASTRA_OK) {
    if (rc != ASTRA_UNSUPPORTED) {  // Python reports it and disables the patch in this process
      self->last_error = rc;
      self->active = 0;
    }
    return miss();
  }
  self->calls++;
  int outs = 0, first = -1;
  for (int i = 0; i < self->n; ++i)
    if (self->args[i].kind == 'o') { outs++; if (first < 0) first = i; }
  if (outs == 0) Py_RETURN_NONE;
  if (outs == 1) return THPVariable_Wrap(tensors[tslot[first]]);
  PyObject* result = PyTuple_New(outs);
  if (result == nullptr) return nullptr;
  for (int i = 0, k = 0; i < self->n; ++i)
    if (self->args[i].kind == 'o') PyTuple_SET_ITEM(result, k++, THPVariable_Wrap(tensors[tslot[i]]));
  return result;
}

PyObject* fast_call(PyObject* self_obj, PyObject* args, PyObject* kwargs) {
  if (kwargs && PyDict_GET_SIZE(kwargs)) return miss();  // keywords: bound in Python first (`bound`)
  try {
    return call_impl(self_obj, args, args, nullptr);
  } catch (const std::exception&) {  // e.g. an allocation failure: the Python path raises it properly
    return miss();
  }
}

// bound(values, args, kwargs): a keyword call (SGLang's rope) that Python bound to spec order (`values`, a
// tuple; None where the call left an argument out), served like a positional one; a DEFERRED shape calls the
// original with the caller's own `args` / `kwargs`.
PyObject* fast_bound(PyObject* self_obj, PyObject* py_args) {
  PyObject *values, *args, *kwargs;
  if (!PyArg_ParseTuple(py_args, "O!O!O!", &PyTuple_Type, &values, &PyTuple_Type, &args, &PyDict_Type, &kwargs))
    return nullptr;
  try {
    return call_impl(self_obj, values, args, kwargs);
  } catch (const std::exception&) {
    return miss();
  }
}

// remember(tensors, verdict): the verdict for the (shape, strides, dtype, device) of these tensors, spec order.
PyObject* fast_remember(PyObject* self_obj, PyObject* args) {
  FastOp* self = reinterpret_cast<FastOp*>(self_obj);
  PyObject* seq;
  int ok;
  if (!PyArg_ParseTuple(args, "Oi", &seq, &ok)) return nullptr;
  if (ok < kUncovered || ok > kDeferred) {
    PyErr_Format(PyExc_ValueError, "unknown verdict %d", ok);
    return nullptr;
  }
  PyObject* fast = PySequence_Fast(seq, "tensors must be a sequence");
  if (fast == nullptr) return nullptr;
  const Py_ssize_t nt = PySequence_Fast_GET_SIZE(fast);
  if (nt != self->nt) {
    Py_DECREF(fast);
    PyErr_Format(PyExc_ValueError, "expected %d tensors, got %zd", self->nt, nt);
    return nullptr;
  }
  std::vector<int64_t> key(nt * kKeyWords);
  bool describable = true;
  for (Py_ssize_t j = 0; j < nt && describable; ++j) {
    PyObject* o = PySequence_Fast_GET_ITEM(fast, j);
    describable = THPVariable_Check(o) && key_of(THPVariable_Unpack(o), self->cuda, key.data() + j * kKeyWords);
  }
  Py_DECREF(fast);
  if (describable) {
    Verdicts* v = self->verdicts;
    auto& bucket = v->table[hash_key(key.data(), (int)key.size())];
    bool found = false;
    for (auto& entry : bucket)
      if (entry.first == key) { entry.second = ok; found = true; }
    if (!found) bucket.emplace_back(key, ok);
    v->last_ok = -1;
  }
  return PyBool_FromLong(describable);
}

PyObject* fast_forget(PyObject* self_obj, PyObject*) {
  Verdicts* v = reinterpret_cast<FastOp*>(self_obj)->verdicts;
  v->table.clear();
  v->last_ok = -1;
  Py_RETURN_NONE;
}

// FastOp(address, kinds, likes, defaults, rules, stream_fn[, original]): kinds one char per spec argument ('t', 'o', 's');
// per argument: likes the out's like-index (or -1), defaults the scalar's default (or None), rules None or
// (dtype_src, ((src, dim, af, bf, ae, be), ...)) for an out allocated from its dims.
int fast_init(PyObject* self_obj, PyObject* args, PyObject*) {
  FastOp* self = reinterpret_cast<FastOp*>(self_obj);
  unsigned long long address;
  const char* kinds;
  PyObject *likes, *defaults, *rules, *stream_fn, *original = Py_None;
  if (!PyArg_ParseTuple(args, "KsOOO!O|O", &address, &kinds, &likes, &defaults, &PyTuple_Type, &rules, &stream_fn,
                        &original))
    return -1;
  if (original != Py_None && !PyCallable_Check(original)) {
    PyErr_SetString(PyExc_TypeError, "FastOp: original must be callable or None");
    return -1;
  }
  if (stream_fn != Py_None && !PyCallable_Check(stream_fn)) {
    PyErr_SetString(PyExc_TypeError, "FastOp: stream_fn must be callable or None");
    return -1;
  }
  const int n = (int)std::strlen(kinds);
  if (n > kMaxArgs || !PyTuple_Check(likes) || !PyTuple_Check(defaults) || PyTuple_GET_SIZE(likes) != n ||
      PyTuple_GET_SIZE(defaults) != n || PyTuple_GET_SIZE(rules) != n || address == 0) {
    PyErr_SetString(PyExc_ValueError, "FastOp: bad argument description");
    return -1;
  }
  self->fn = reinterpret_cast<LaunchFn>(address);
  self->n = n;
  self->nt = self->ns = 0;
  for (int i = 0; i < n; ++i) {
    Arg& a = self->args[i];
    a.kind = kinds[i];
    a.like = (int)PyLong_AsLong(PyTuple_GET_ITEM(likes, i));
    PyObject* d = PyTuple_GET_ITEM(defaults, i);
    a.has_default = d != Py_None;
    a.value = a.has_default ? PyFloat_AsDouble(d) : 0.0;
    a.ndims = -1;
    PyObject* rule = PyTuple_GET_ITEM(rules, i);
    if (rule != Py_None) {
      PyObject* dims;
      if (!PyArg_ParseTuple(rule, "iO!", &a.dtype_src, &PyTuple_Type, &dims)) return -1;
      a.ndims = (int)PyTuple_GET_SIZE(dims);
      if (a.ndims < 1 || a.ndims > ASTRA_MAX_DIMS) {
        PyErr_SetString(PyExc_ValueError, "FastOp: an output rule needs 1-4 dims");
        return -1;
      }
      for (int k = 0; k < a.ndims; ++k) {
        DimRule& r = a.rules[k];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(dims, k), "iiLLLL", &r.src, &r.dim, &r.af, &r.bf, &r.ae, &r.be))
          return -1;
        if (r.src < 0 || r.src >= n || kinds[r.src] != 't' || r.af == 0 ||
            (a.dtype_src >= n || (a.dtype_src >= 0 && kinds[a.dtype_src] != 't'))) {
          PyErr_SetString(PyExc_ValueError, "FastOp: an output rule must refer to tensor arguments");
          return -1;
        }
      }
    }
    if (PyErr_Occurred()) return -1;
    if (a.kind == 's') self->ns++;
    else if (a.kind == 't' || a.kind == 'o') self->nt++;
    else { PyErr_Format(PyExc_ValueError, "FastOp: unknown argument kind %c", a.kind); return -1; }
    if (a.kind == 'o' && (a.like >= n || (a.like >= 0 && kinds[a.like] != 't'))) {
      PyErr_SetString(PyExc_ValueError, "FastOp: an output must be shaped like a tensor argument");
      return -1;
    }
  }
  Py_INCREF(stream_fn);
  Py_XSETREF(self->stream_fn, stream_fn);
  Py_INCREF(original);
  Py_XSETREF(self->original, original);
  self->cuda = stream_fn != Py_None;
  self->active = 1;
  self->last_error = 0;
  self->calls = self->deferred = 0;
  if (self->verdicts == nullptr) self->verdicts = new Verdicts();
  return 0;
}

void fast_dealloc(PyObject* self_obj) {
  delete reinterpret_cast<FastOp*>(self_obj)->verdicts;
  Py_XDECREF(reinterpret_cast<FastOp*>(self_obj)->stream_fn);
  Py_XDECREF(reinterpret_cast<FastOp*>(self_obj)->original);
  Py_TYPE(self_obj)->tp_free(self_obj);
}

PyObject* get_verdicts(PyObject* self_obj, void*) {
  size_t n = 0;
  for (const auto& bucket : reinterpret_cast<FastOp*>(self_obj)->verdicts->table) n += bucket.second.size();
  return PyLong_FromSize_t(n);
}

PyMethodDef fast_methods[] = {
    {"bound", fast_bound, METH_VARARGS, "bound(values, args, kwargs): a keyword call bound to spec order"},
    {"remember", fast_remember, METH_VARARGS, "remember(tensors, verdict): cache the coverage verdict (0-2) of these tensors"},
    {"forget", fast_forget, METH_NOARGS, "forget every cached verdict"},
    {nullptr, nullptr, 0, nullptr}};

PyMemberDef fast_members[] = {
    {"active", T_INT, offsetof(FastOp, active), 0, "0: every call returns MISS"},
    {"last_error", T_INT, offsetof(FastOp, last_error), 0, "cudaError of the launch that deactivated the op"},
    {"calls", T_ULONGLONG, offsetof(FastOp, calls), READONLY, "calls served here, each a kernel launch"},
    {"deferred", T_ULONGLONG, offsetof(FastOp, deferred), READONLY, "DEFERRED calls served here by the original"},
    {nullptr, 0, 0, 0, nullptr}};

PyGetSetDef fast_getset[] = {{"verdicts", get_verdicts, nullptr, "cached verdicts", nullptr},
                             {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyTypeObject FastOpType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "astra_fastcall", "C fast path of astra-sglang patched ops", -1,
                          nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_astra_fastcall() {
  FastOpType.tp_name = "astra_fastcall.FastOp";
  FastOpType.tp_basicsize = sizeof(FastOp);
  FastOpType.tp_flags = Py_TPFLAGS_DEFAULT;
  FastOpType.tp_new = PyType_GenericNew;
  FastOpType.tp_init = fast_init;
  FastOpType.tp_dealloc = fast_dealloc;
  FastOpType.tp_call = fast_call;
  FastOpType.tp_methods = fast_methods;
  FastOpType.tp_members = fast_members;
  FastOpType.tp_getset = fast_getset;
  if (PyType_Ready(&FastOpType) < 0) return nullptr;
  PyObject* m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  g_miss = PyObject_CallObject(reinterpret_cast<PyObject*>(&PyBaseObject_Type), nullptr);
  Py_INCREF(&FastOpType);
  if (g_miss == nullptr || PyModule_AddObject(m, "FastOp", reinterpret_cast<PyObject*>(&FastOpType)) < 0 ||
      PyModule_AddObject(m, "MISS", (Py_INCREF(g_miss), g_miss)) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
