// _tilec_fast: the O(1) GPU fast paths of tilec's public calls in C++ --
// flash_attn_with_kvcache's serving call (decode), flash_attn_func's dense
// call (forward) and flash_attn_varlen_func's (varlen). A torch extension,
// built where the Python it is built for imports torch
// (lib/runtime/CMakeLists.txt, TILEC_TORCH_EXTENSION).
//
// Why: the Python fast paths (tilec.flash_decode._gpu_fast_path,
// tilec.flash_attn._gpu_fast_path) spend most of a call's host time on
// tensor attribute reads at 0.1-0.2 us each through torch's Python bindings,
// allocations through the dispatcher's Python entry and the interpreter
// between them: the decode call 20-32 us beyond its launches on the H200's
// host (bench/RESULTS.md, session 17 run 4), over the launch-path issue's
// budget of 15. Here the attributes are plain field reads of at::Tensor and
// the buffers come from at::empty.
//
// What stays in Python: the plans (which kernels, tiles, splits, grids) are
// the Python modules' LaunchCaches under the same keys, filled by their
// builders on a miss; the launches go through tilec.runtime.launch_on and the
// prepared launchers (launch_fast, given addresses as ints), and the stream
// comes from tilec.runtime.raw_stream. So this file mirrors only the fast
// paths' checks and argument lists; for anything it does not take it returns
// None and the Python path runs (and raises the errors). Its launches are
// compared with the Python paths' argument by argument in
// test/python/test_flash_decode_native.py and test_flash_attn_native.py.
#include <ATen/core/Tensor.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <Python.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#ifndef TILEC_TORCH_VERSION
#error "TILEC_TORCH_VERSION: the torch.__version__ this module is built against"
#endif

namespace {

/// An owned reference (steals what it is given; nullptr allowed).
class Ref {
public:
  Ref() = default;
  explicit Ref(PyObject *o) : o_(o) {}
  Ref(const Ref &) = delete;
  Ref &operator=(const Ref &) = delete;
  Ref(Ref &&other) noexcept : o_(other.release()) {}
  Ref &operator=(Ref &&other) noexcept {
    reset(other.release());
    return *this;
  }
  ~Ref() { Py_XDECREF(o_); }
  PyObject *get() const { return o_; }
  PyObject *release() {
    PyObject *o = o_;
    o_ = nullptr;
    return o;
  }
  void reset(PyObject *o = nullptr) {
    Py_XDECREF(o_);
    o_ = o;
  }
  explicit operator bool() const { return o_ != nullptr; }

private:
  PyObject *o_ = nullptr;
};

/// What configure() was given: tilec.flash_decode, tilec.flash_attn and
/// tilec.runtime (their dicts are read at each call, so monkeypatched
/// settings are seen).
struct State {
  PyObject *decode = nullptr;   // module tilec.flash_decode (owned)
  PyObject *attn = nullptr;     // module tilec.flash_attn (owned)
  PyObject *runtime = nullptr;  // module tilec.runtime (owned)
  PyObject *decodeDict = nullptr;
  PyObject *attnDict = nullptr;
  PyObject *runtimeDict = nullptr;
  bool cpuAsCuda = false;       // tests: CPU tensors stand for CUDA device 0
};
State state;

struct Names {
  PyObject *fastPlans, *makeFastPlans, *fastDummies, *counters, *nativeCounters, *fusedAppend,
      *checkPagedCapacity, *knobValues, *rawStreamVar, *rawStream, *launchOn, *float16, *bfloat16,
      *gpuLaunches, *checkCudaVarlenValues, *cudaKeys, *sequenceBuffers, *priorWait, *fastAppends, *unbounded,
      *maxHeadDim, *fastRotaries, *float32;
};
Names names;

bool intern(PyObject *&slot, const char *text) {
  slot = PyUnicode_InternFromString(text);
  return slot != nullptr;
}

/// A borrowed module global, or nullptr (no exception) when missing.
PyObject *global(PyObject *dict, PyObject *name) { return PyDict_GetItemWithError(dict, name); }

/// An exact Python int (not bool) that fits in 64 bits.
bool exactInt(PyObject *o, int64_t &out) {
  if (!PyLong_CheckExact(o))
    return false;
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  out = v;
  return true;
}

/// float(o) as Python computes it; false (no exception) when it raises.
bool toDouble(PyObject *o, double &out) {
  double v = PyFloat_AsDouble(o);
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  out = v;
  return true;
}

/// Whether q is a tensor this file reads directly: a torch.Tensor, not a
/// subclass (whose __torch_function__ the Python path honours: a user's
/// wrapper, a DTensor), except the tests' CPU tensors posing as CUDA ones;
/// and no TorchFunctionMode active.
bool plainTensor(PyObject *q) {
  // An active TorchFunctionMode sees the Python path's tensor calls, not these.
  if (at::impl::torch_function_mode_enabled())
    return false;
  return THPVariable_CheckExact(q) || (state.cpuAsCuda && THPVariable_Check(q));
}

/// The CUDA device index of t, or -1: not a CUDA tensor (with cpuAsCuda, a
/// CPU tensor is device 0, as the tests' posing tensors say).
int deviceOf(const at::Tensor &t) {
  if (t.is_cuda())
    return t.get_device();
  return state.cpuAsCuda && t.is_cpu() ? 0 : -1;
}

/// A 4-D tensor's sizes or strides, copied: the IntArrayRef views point into
/// the tensor, whose metadata Python code run in between (a plan's builder,
/// a launch) could change.
using Dims = std::array<int64_t, 4>;
Dims dims(at::IntArrayRef a) {
  Dims d{0, 0, 0, 0};
  for (size_t i = 0; i < a.size() && i < 4; ++i)
    d[i] = a[i];
  return d;
}

/// A module int read at each call (tests and users may change it), or
/// false with an exception set.
bool moduleInt(PyObject *dict, PyObject *name, int64_t &out) {
  PyObject *value = PyDict_GetItemWithError(dict, name);
  if (!value) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_AttributeError, "tilec: module has no %U", name);
    return false;
  }
  out = PyLong_AsLongLong(value);
  return !(out == -1 && PyErr_Occurred());
}

uint64_t address(const at::Tensor &t) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t.data_ptr()));
}

PyObject *pyInt(int64_t v) { return PyLong_FromLongLong(v); }
PyObject *pyAddress(uint64_t v) { return PyLong_FromUnsignedLongLong(v); }

/// A tuple of new references; nullptr (exception set) when one is nullptr.
Ref tupleOf(std::initializer_list<PyObject *> items) {
  Ref t(PyTuple_New(static_cast<Py_ssize_t>(items.size())));
  Py_ssize_t i = 0;
  bool ok = static_cast<bool>(t);
  for (PyObject *o : items) {
    if (!o)
      ok = false;
    if (t && o)
      PyTuple_SET_ITEM(t.get(), i, o);
    else
      Py_XDECREF(o);
    ++i;
  }
  if (!ok)
    return Ref();
  return t;
}

PyObject *newBool(bool b) { return Py_NewRef(b ? Py_True : Py_False); }

/// None, new reference: "not taken here, run the Python path".
PyObject *notTaken() { Py_RETURN_NONE; }

/// torch's current stream on `device` as tilec.runtime.raw_stream gives it
/// (its cached getter); nullptr with an exception set on failure.
Ref currentStream(PyObject *device) {
  PyObject *getter = global(state.runtimeDict, names.rawStreamVar);
  if (getter && getter != Py_None)
    return Ref(PyObject_CallOneArg(getter, device));
  if (PyErr_Occurred())
    return Ref();
  return Ref(PyObject_CallMethodOneArg(state.runtime, names.rawStream, device));
}

/// tilec.runtime.launch_on(device, launch, args, stream[, grid]); false with
/// an exception set on failure.
bool launchOn(PyObject *device, PyObject *launch, PyObject *args, PyObject *stream, PyObject *grid) {
  PyObject *fn = global(state.runtimeDict, names.launchOn);
  if (!fn) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_AttributeError, "tilec.runtime has no launch_on");
    return false;
  }
  PyObject *call[] = {device, launch, args, stream, grid};
  Ref done(PyObject_Vectorcall(fn, call, grid ? 5 : 4, nullptr));
  return static_cast<bool>(done);
}

bool requireModule(PyObject *module, const char *name) {
  if (module)
    return true;
  PyErr_Format(PyExc_RuntimeError, "_tilec_fast.configure(%s=...) was not called", name);
  return false;
}

/// A window (left, right): an exact tuple or list of two exact ints.
bool windowPair(PyObject *window, int64_t &left, int64_t &right) {
  return (PyTuple_CheckExact(window) || PyList_CheckExact(window)) && PySequence_Fast_GET_SIZE(window) == 2 &&
         exactInt(PySequence_Fast_GET_ITEM(window, 0), left) && exactInt(PySequence_Fast_GET_ITEM(window, 1), right);
}

/// A dtype's name in the plans' keys (borrowed), or nullptr: not f16/bf16.
PyObject *dtypeName(at::ScalarType dt) {
  return dt == at::kHalf ? names.float16 : dt == at::kBFloat16 ? names.bfloat16 : nullptr;
}

/// softmax_scale (None: 1/sqrt(head_dim)) and softcap, as float() reads them
/// in Python; false (no exception) when either does not convert, or scale is
/// not > 0 or softcap not >= 0 (NaN fails both).
bool scaleAndSoftcap(PyObject *scaleo, PyObject *softcapo, int64_t headDim, double &scale, double &softcap) {
  if (scaleo == Py_None)
    scale = 1.0 / std::sqrt(static_cast<double>(headDim));
  else if (!toDouble(scaleo, scale))
    return false;
  return toDouble(softcapo, softcap) && scale > 0 && softcap >= 0;
}

/// A device's two dummy buffers, (tensor, tensor) in a module's _FAST_DUMMIES
/// under the device index, made by the Python path's first call there; held
/// until the launches (their addresses go to the kernels as ints, and Python
/// code runs in between). Empty `held`: with an exception set, an error;
/// without, none yet (not taken).
struct Dummies {
  uint64_t first = 0, second = 0;
  Ref held;
};
Dummies deviceDummies(PyObject *dict, PyObject *deviceKey, const char *what) {
  Dummies found;
  PyObject *dummiesDict = global(dict, names.fastDummies);
  PyObject *dummies = dummiesDict && PyDict_Check(dummiesDict) ? PyDict_GetItemWithError(dummiesDict, deviceKey)
                                                               : nullptr;
  if (!dummies)
    return found;
  if (!PyTuple_Check(dummies) || PyTuple_GET_SIZE(dummies) != 2 ||
      !THPVariable_Check(PyTuple_GET_ITEM(dummies, 0)) || !THPVariable_Check(PyTuple_GET_ITEM(dummies, 1))) {
    PyErr_Format(PyExc_TypeError, "%s: expected two tensors per device", what);
    return found;
  }
  found.held.reset(Py_NewRef(dummies));
  found.first = address(THPVariable_Unpack(PyTuple_GET_ITEM(dummies, 0)));
  found.second = address(THPVariable_Unpack(PyTuple_GET_ITEM(dummies, 1)));
  return found;
}

/// The launcher flash_decode's LaunchCache `name` (_FAST_ROTARIES,
/// _FAST_APPENDS) holds for `key`, built by its builder on a miss. Empty:
/// with an exception set, an error; without, no such cache (not taken).
Ref decodeLauncher(PyObject *name, Ref key) {
  if (!key)
    return Ref();
  PyObject *cache = global(state.decodeDict, name);
  return cache ? Ref(PyObject_GetItem(cache, key.get())) : Ref();
}

/// ALiBi slopes a fast path takes (flash_attn._fast_alibi): f32 (heads,) or
/// (batch, heads), the last dimension contiguous, on the device; their
/// tensor in `slopes` and stride_alibi_b in `strideB`. false: not taken.
bool fastAlibi(PyObject *o, PyTypeObject *kind, int64_t batch, int64_t heads, int device,
               const at::Tensor *&slopes, int64_t &strideB) {
  if (Py_TYPE(o) != kind)
    return false;
  slopes = &THPVariable_Unpack(o);
  const int64_t nd = slopes->dim();
  if (slopes->scalar_type() != at::kFloat || deviceOf(*slopes) != device || (nd != 1 && nd != 2) ||
      slopes->size(nd - 1) != heads || (nd == 2 && slopes->size(0) != batch) || slopes->stride(nd - 1) != 1)
    return false;
  strideB = nd == 2 ? slopes->stride(0) : 0;
  return true;
}

PyObject *decodeFastPath(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 19) {
    PyErr_SetString(PyExc_TypeError,
                    "decode(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal, "
                    "window_size, softcap, num_splits, return_lse, k, v, rotary_cos, rotary_sin, "
                    "rotary_interleaved, cache_batch_idx, cache_leftpad, alibi_slopes): 19 arguments");
    return nullptr;
  }
  if (!requireModule(state.decode, "flash_decode") || !requireModule(state.runtime, "runtime"))
    return nullptr;
  PyObject *qo = args[0], *kco = args[1], *vco = args[2], *lenso = args[3], *tableo = args[4],
           *scaleo = args[5], *causalo = args[6], *windowo = args[7], *softcapo = args[8],
           *splitso = args[9], *returnLseo = args[10], *kno = args[11], *vno = args[12], *coso = args[13],
           *sino = args[14], *interleavedo = args[15], *batchIdxo = args[16], *leftpado = args[17],
           *alibio = args[18];

  // The same tests, in the same order, as _gpu_fast_path.
  PyTypeObject *kind = Py_TYPE(qo);
  if (!plainTensor(qo) || Py_TYPE(kco) != kind || Py_TYPE(vco) != kind)
    return notTaken();
  int64_t numSplits, left, right;
  if (!exactInt(splitso, numSplits) || numSplits < 0 || !windowPair(windowo, left, right) || left < -1 ||
      right < -1)
    return notTaken();
  const at::Tensor &q = THPVariable_Unpack(qo);
  const at::Tensor &kc = THPVariable_Unpack(kco);
  const at::Tensor &vc = THPVariable_Unpack(vco);
  const at::ScalarType dt = q.scalar_type();
  PyObject *dtype = dtypeName(dt);
  if (!dtype || kc.scalar_type() != dt || vc.scalar_type() != dt)
    return notTaken();
  if (q.dim() != 4 || kc.dim() != 4 || vc.sizes() != kc.sizes())
    return notTaken();
  const Dims shapeQ = dims(q.sizes()), shapeK = dims(kc.sizes());
  const int64_t batch = shapeQ[0], seqlenQ = shapeQ[1], heads = shapeQ[2], headDim = shapeQ[3];
  const int64_t headsK = shapeK[2];
  if (seqlenQ < 1 || shapeK[3] != headDim || (headDim & 7) || !(8 <= headDim && headDim <= 256) ||
      !(batch && heads && headsK && shapeK[0] && shapeK[1]) || heads % headsK)
    return notTaken();
  const int device = deviceOf(q);
  if (device < 0 || deviceOf(kc) != device || deviceOf(vc) != device)
    return notTaken();
  const at::Tensor *table = nullptr;
  int64_t pageSize, capacity, tableStride = 0;
  if (tableo != Py_None) {
    if (Py_TYPE(tableo) != kind)
      return notTaken();
    table = &THPVariable_Unpack(tableo);
    if (table->scalar_type() != at::kInt || table->dim() != 2 || deviceOf(*table) != device ||
        table->size(0) != batch || !table->size(1) || table->stride(1) != 1 || (shapeK[1] & 15))
      return notTaken();
    pageSize = shapeK[1];
    capacity = table->size(1) * pageSize;
    tableStride = table->stride(0);
    if (batchIdxo != Py_None || leftpado != Py_None)
      return notTaken();  // the general path says why
  } else {
    if (shapeK[0] < batch && batchIdxo == Py_None)
      return notTaken();
    pageSize = 0;
    capacity = shapeK[1];
  }
  // cache_batch_idx, cache_leftpad: int32 (batch,), contiguous.
  const at::Tensor *batchIdx = nullptr, *leftpad = nullptr;
  for (auto [o, t] : {std::pair{batchIdxo, &batchIdx}, std::pair{leftpado, &leftpad}}) {
    if (o == Py_None)
      continue;
    if (Py_TYPE(o) != kind)
      return notTaken();
    *t = &THPVariable_Unpack(o);
    if ((*t)->scalar_type() != at::kInt || (*t)->dim() != 1 || (*t)->size(0) != batch ||
        deviceOf(**t) != device || (batch > 1 && (*t)->stride(0) != 1))
      return notTaken();
  }
  // ALiBi: f32 slopes (heads,) or (batch, heads), the last dimension contiguous.
  const at::Tensor *slopes = nullptr;
  int64_t slopesStrideB = 0;
  if (alibio != Py_None && !fastAlibi(alibio, kind, batch, heads, device, slopes, slopesStrideB))
    return notTaken();
  int64_t seqlenNew = 0;
  const at::Tensor *kn = nullptr, *vn = nullptr;
  Dims skn{}, svn{};
  if (kno != Py_None) {
    if (Py_TYPE(kno) != kind || Py_TYPE(vno) != kind || lenso == Py_None)
      return notTaken();
    kn = &THPVariable_Unpack(kno);
    vn = &THPVariable_Unpack(vno);
    if (kn->scalar_type() != dt || vn->scalar_type() != dt || kn->dim() != 4 || vn->sizes() != kn->sizes() ||
        kn->size(0) != batch || kn->size(2) != headsK || kn->size(3) != headDim || deviceOf(*kn) != device ||
        deviceOf(*vn) != device)
      return notTaken();
    skn = dims(kn->strides()), svn = dims(vn->strides());
    if (skn[3] != 1 || svn[3] != 1 || ((skn[0] | skn[1] | skn[2] | svn[0] | svn[1] | svn[2]) & 7) ||
        ((address(*kn) | address(*vn)) & 15))
      return notTaken();
    seqlenNew = kn->size(1);
  } else if (vno != Py_None) {
    return notTaken();
  }
  const bool perBatch = lenso != Py_None && !PyLong_CheckExact(lenso);
  const at::Tensor *lens = nullptr;
  int64_t uniform;
  if (lenso == Py_None) {
    uniform = capacity;
  } else if (!perBatch) {
    if (!exactInt(lenso, uniform) || !(0 <= uniform && uniform <= capacity - seqlenNew))
      return notTaken();
  } else {
    if (Py_TYPE(lenso) != kind)
      return notTaken();
    lens = &THPVariable_Unpack(lenso);
    if (lens->scalar_type() != at::kInt || lens->dim() != 1 || lens->size(0) != batch ||
        deviceOf(*lens) != device || (batch > 1 && lens->stride(0) != 1))
      return notTaken();
    if (pageSize) {
      // The Python path reads max(cache_seqlens) back when asked to.
      PyObject *check = global(state.decodeDict, names.checkPagedCapacity);
      if (!check && PyErr_Occurred())
        return nullptr;
      int truth = check ? PyObject_IsTrue(check) : 0;
      if (truth < 0)
        return nullptr;
      if (truth)
        return notTaken();
    }
    uniform = 0;
  }
  const Dims sq = dims(q.strides()), sk = dims(kc.strides()), sv = dims(vc.strides());
  // Last dimension contiguous; every row 16-byte aligned (2-byte elements).
  if (sq[3] != 1 || sk[3] != 1 || sv[3] != 1 ||
      ((sq[0] | sq[2] | sk[0] | sk[1] | sk[2] | sv[0] | sv[1] | sv[2]) & 7) ||
      ((address(q) | address(kc) | address(vc)) & 15))
    return notTaken();
  double scale, softcap;
  if (!scaleAndSoftcap(scaleo, softcapo, headDim, scale, softcap) ||
      !(softcap < std::numeric_limits<double>::infinity()))
    return notTaken();
  const int causal = PyObject_IsTrue(causalo);
  if (causal < 0)
    return nullptr;
  if (causal)
    right = 0;
  const bool window = left >= 0 || right > 0;
  // Rotary tables: f32/f16/bf16 of one dtype, 16-byte rows, long enough
  // where the lengths are known (else the general path's error).
  const bool rotary = coso != Py_None || sino != Py_None;
  const at::Tensor *cosT = nullptr, *sinT = nullptr;
  PyObject *tableDtype = nullptr;
  int64_t half = 0, qStep = 0;
  if (rotary) {
    if (Py_TYPE(coso) != kind || Py_TYPE(sino) != kind || lenso == Py_None)
      return notTaken();
    cosT = &THPVariable_Unpack(coso);
    sinT = &THPVariable_Unpack(sino);
    const at::ScalarType tdt = cosT->scalar_type();
    tableDtype = tdt == at::kFloat ? names.float32 : dtypeName(tdt);
    if (!tableDtype || sinT->scalar_type() != tdt || cosT->dim() != 2 || sinT->sizes() != cosT->sizes() ||
        deviceOf(*cosT) != device || deviceOf(*sinT) != device)
      return notTaken();
    half = cosT->size(1);
    if (!half || (half & 7) || 2 * half > headDim || !cosT->size(0) || cosT->stride(1) != 1 ||
        sinT->stride(1) != 1 || (((cosT->stride(0) | sinT->stride(0)) * cosT->element_size()) & 15) ||
        ((address(*cosT) | address(*sinT)) & 15))
      return notTaken();
    qStep = left >= 0 || right >= 0 ? 1 : 0;   // _rotary_q_step
    if (!perBatch && cosT->size(0) < uniform + std::max(seqlenNew, 1 + (seqlenQ - 1) * qStep))
      return notTaken();
  }
  const bool causalOnly = right == 0 && left < 0 && seqlenQ > 1;
  PyObject *fusedAppendKnob = global(state.decodeDict, names.fusedAppend);
  if (!fusedAppendKnob)
    return PyErr_Occurred() ? nullptr : notTaken();
  const int fusedAppendOn = PyObject_IsTrue(fusedAppendKnob);
  if (fusedAppendOn < 0)
    return nullptr;
  const bool fusedAppend = seqlenNew == 1 && fusedAppendOn;

  // The plan: _FAST_PLANS[key], key as _gpu_fast_path builds it.
  PyObject *knobValues = global(state.decodeDict, names.knobValues);
  if (!knobValues)
    return PyErr_Occurred() ? nullptr : notTaken();
  Ref knobs(PyObject_CallOneArg(knobValues, state.decodeDict));
  if (!knobs)
    return nullptr;
  Ref key = tupleOf({Py_NewRef(dtype), pyInt(batch), pyInt(seqlenQ), pyInt(heads), pyInt(headsK),
                     pyInt(headDim), pyInt(capacity), pyInt(pageSize), pyInt(numSplits), newBool(perBatch),
                     newBool(causalOnly), newBool(window), newBool(softcap > 0), newBool(fusedAppend),
                     newBool(slopes != nullptr), newBool(batchIdx != nullptr), newBool(leftpad != nullptr),
                     pyInt(device), knobs.release()});
  if (!key)
    return nullptr;
  PyObject *plans = global(state.decodeDict, names.fastPlans);
  Ref made;
  if (!plans || plans == Py_None) {
    if (PyErr_Occurred())
      return nullptr;
    made.reset(PyObject_CallMethodNoArgs(state.decode, names.makeFastPlans));
    if (!made)
      return nullptr;
    plans = made.get();
  }
  Ref plan(PyObject_GetItem(plans, key.get()));
  if (!plan)
    return nullptr;
  if (!PyTuple_Check(plan.get()) || PyTuple_GET_SIZE(plan.get()) != 6) {
    PyErr_SetString(PyExc_TypeError, "_FAST_PLANS: expected a 6-tuple (launch, combine, splits, grid, "
                                     "combine grid, fused)");
    return nullptr;
  }
  PyObject *launch = PyTuple_GET_ITEM(plan.get(), 0), *combine = PyTuple_GET_ITEM(plan.get(), 1),
           *grid = PyTuple_GET_ITEM(plan.get(), 3), *combineGrid = PyTuple_GET_ITEM(plan.get(), 4);
  int64_t splits = PyLong_AsLongLong(PyTuple_GET_ITEM(plan.get(), 2));
  if (splits == -1 && PyErr_Occurred())
    return nullptr;
  const int fused = PyObject_IsTrue(PyTuple_GET_ITEM(plan.get(), 5));
  if (fused < 0)
    return nullptr;

  // The int32 and f32 dummies of the device (flash_decode._FAST_DUMMIES).
  Ref deviceKey(pyInt(device));
  if (!deviceKey)
    return nullptr;
  const Dummies dummies = deviceDummies(state.decodeDict, deviceKey.get(), "flash_decode._FAST_DUMMIES");
  if (!dummies.held)
    return PyErr_Occurred() ? nullptr : notTaken();
  const uint64_t ints = dummies.first, floats = dummies.second;
  Ref stream = currentStream(deviceKey.get());
  if (!stream)
    return nullptr;
  PyObject *priorWait = global(state.decodeDict, names.priorWait);
  if (!priorWait)
    return PyErr_Occurred() ? nullptr : notTaken();

  // Rotary: q and the new k turned into fresh buffers (the rotary kernel,
  // its launcher from the LaunchCache _FAST_ROTARIES), which the append and
  // the attention read instead.
  const at::Tensor *qp = &q;
  Dims sqa = sq;
  at::Tensor qRot, kRot;
  if (rotary) {
    const int interleaved = PyObject_IsTrue(interleavedo);
    if (interleaved < 0)
      return nullptr;
    qRot = at::empty(q.sizes(), q.options());
    if (seqlenNew)
      kRot = at::empty(kn->sizes(), kn->options());
    const at::Tensor &kIn = seqlenNew ? *kn : q, &kOut = seqlenNew ? kRot : qRot;
    Ref rotate = decodeLauncher(
        names.fastRotaries,
        tupleOf({Py_NewRef(dtype), Py_NewRef(tableDtype), pyInt(headDim), pyInt(2 * half), newBool(interleaved),
                 pyInt(std::max(heads, headsK)), newBool(perBatch), Py_NewRef(deviceKey.get()),
                 Py_NewRef(priorWait)}));
    if (!rotate)
      return PyErr_Occurred() ? nullptr : notTaken();
    const Dims ski = dims(kIn.strides()), sqo = dims(qRot.strides()), sko = dims(kOut.strides());
    const int64_t parts = seqlenNew ? 2 : 1;
    // The rotary kernel's parameters (_rotary_args).
    Ref rotaryArgs = tupleOf({
        pyAddress(address(q)), pyAddress(address(kIn)), pyAddress(address(qRot)), pyAddress(address(kOut)),
        pyAddress(address(*cosT)), pyAddress(address(*sinT)), pyAddress(perBatch ? address(*lens) : ints),
        pyInt(seqlenQ), pyInt(seqlenNew), pyInt(batch), pyInt(parts), pyInt(heads), pyInt(kIn.size(2)),
        pyInt(uniform), pyInt(qStep), pyInt(cosT->size(0)),
        pyInt(sq[0]), pyInt(sq[1]), pyInt(sq[2]), pyInt(ski[0]), pyInt(ski[1]), pyInt(ski[2]),
        pyInt(sqo[0]), pyInt(sqo[1]), pyInt(sqo[2]), pyInt(sko[0]), pyInt(sko[1]), pyInt(sko[2]),
        pyInt(cosT->stride(0)), pyInt(sinT->stride(0))});
    Ref rotaryGrid = tupleOf({pyInt(std::max(seqlenQ, seqlenNew)), pyInt(batch), pyInt(parts)});
    if (!rotaryArgs || !rotaryGrid ||
        !launchOn(deviceKey.get(), rotate.get(), rotaryArgs.get(), stream.get(), rotaryGrid.get()))
      return nullptr;
    qp = &qRot;
    sqa = sqo;
    if (seqlenNew) {
      kn = &kRot;
      skn = sko;
    }
  }

  const int64_t group = heads / headsK;
  const int64_t rows = heads * seqlenQ;           // of a sequence: (head, query position)
  const int64_t hd = rows * headDim;
  const int64_t kd = group * seqlenQ * headDim;   // a KV head's packed rows
  // The kernel's view of q and out: (batch, heads, seqlen_q, d) rows (see
  // _gpu_fast_path); one token: q's own head stride, out (batch, 1, heads, d).
  at::Tensor obuf, qRows;
  int64_t qStrides[3];
  if (seqlenQ == 1) {
    obuf = at::empty({batch, 1, heads, headDim}, q.options());
    qStrides[0] = sqa[0];
    qStrides[1] = group * sqa[2];
    qStrides[2] = sqa[2];
  } else {
    obuf = at::empty({batch, heads, seqlenQ, headDim}, q.options());
    qRows = qp->transpose(1, 2).contiguous();
    qStrides[0] = hd;
    qStrides[1] = kd;
    qStrides[2] = headDim;
  }
  const int64_t parts = splits > 1 ? splits : 0;
  const int64_t lAt = parts * batch * hd;
  const int64_t lseAt = lAt + (parts * batch * rows + 15) / 16 * 16;
  at::Tensor scratch = at::empty({lseAt + batch * rows}, q.options().dtype(at::kFloat));
  const uint64_t base = address(scratch);
  const uint64_t out = address(obuf);

  uint64_t finals[3] = {ints, floats, ints};
  int64_t finalStrides[5] = {0, 0, 0, 0, 0};
  uint64_t destO, destL;
  int64_t oStrides[4], lStrides[3];
  Ref counters;
  if (parts) {
    destO = base;
    destL = base + 4 * lAt;
    oStrides[0] = batch * hd, oStrides[1] = hd, oStrides[2] = kd, oStrides[3] = headDim;
    lStrides[0] = batch * rows, lStrides[1] = rows, lStrides[2] = group * seqlenQ;
    if (fused) {
      // The kernel merges into out and lse itself (FUSED): the zeroed
      // counters of (device, stream), _counters' buffer.
      int64_t gridY = 0;
      if (!PyTuple_Check(grid) || PyTuple_GET_SIZE(grid) != 3 ||
          ((gridY = PyLong_AsLongLong(PyTuple_GET_ITEM(grid, 1))) == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_TypeError, "_FAST_PLANS: the grid is not an (x, y, z) tuple");
        return nullptr;
      }
      const int64_t need = gridY * batch;
      PyObject *countersDict = global(state.decodeDict, names.counters);
      if (!countersDict && PyErr_Occurred())
        return nullptr;
      Ref countersKey = tupleOf({Py_NewRef(deviceKey.get()), Py_NewRef(stream.get())});
      if (!countersKey)
        return nullptr;
      PyObject *have = countersDict && PyDict_Check(countersDict)
                           ? PyDict_GetItemWithError(countersDict, countersKey.get())
                           : nullptr;
      if (have && THPVariable_Check(have) && THPVariable_Unpack(have).size(0) >= need) {
        counters.reset(Py_NewRef(have));
      } else {
        if (PyErr_Occurred())
          return nullptr;
        Ref needed(pyInt(need));
        if (!needed)
          return nullptr;
        counters.reset(PyObject_CallMethodObjArgs(state.decode, names.nativeCounters, qo, needed.get(),
                                                  deviceKey.get(), stream.get(), nullptr));
        if (!counters)
          return nullptr;
        if (!THPVariable_Check(counters.get())) {
          PyErr_SetString(PyExc_TypeError, "_native_counters: expected a tensor");
          return nullptr;
        }
      }
      finals[0] = out;
      finals[1] = base + 4 * lseAt;
      finals[2] = address(THPVariable_Unpack(counters.get()));
      finalStrides[0] = hd, finalStrides[1] = kd, finalStrides[2] = headDim, finalStrides[3] = rows,
      finalStrides[4] = group * seqlenQ;
    }
  } else {
    destO = out;
    destL = base + 4 * lseAt;
    oStrides[0] = 0, oStrides[1] = hd, oStrides[2] = kd, oStrides[3] = headDim;
    lStrides[0] = 0, lStrides[1] = rows, lStrides[2] = group * seqlenQ;
  }
  uint64_t news[2] = {address(*qp), address(*qp)};
  int64_t newStrides[4] = {0, 0, 0, 0};
  if (fusedAppend) {
    // The decode kernel stores the token's rows itself (APPEND).
    news[0] = address(*kn), news[1] = address(*vn);
    newStrides[0] = skn[0], newStrides[1] = skn[2];
    newStrides[2] = svn[0], newStrides[3] = svn[2];
  }
  // ALiBi: one query token reads the slopes in place (KV head hk's packed
  // rows are heads hk * group + r: _alibi_strides); several, a (batch,
  // heads, seqlen_q) copy with a slope per packed row.
  uint64_t slopesAt = floats;
  int64_t ab[2] = {0, 0};
  at::Tensor slopeRows;
  if (slopes) {
    if (seqlenQ == 1) {
      slopesAt = address(*slopes);
      ab[0] = slopesStrideB;
      ab[1] = group;
    } else {
      const at::Tensor a = slopes->dim() == 2 ? *slopes : slopes->view({1, heads});
      slopeRows = a.expand({batch, heads}).unsqueeze(2).expand({batch, heads, seqlenQ}).contiguous();
      slopesAt = address(slopeRows);
      ab[0] = rows;
      ab[1] = group * seqlenQ;
    }
  }
  int64_t unbounded;
  if (!moduleInt(state.decodeDict, names.unbounded, unbounded))
    return nullptr;
  // flash_decode's parameters, in its order (_gpu_fast_path's `args`).
  Ref decodeArgs = tupleOf({
      pyAddress(seqlenQ == 1 ? address(*qp) : address(qRows)), pyAddress(address(kc)), pyAddress(address(vc)),
      pyAddress(destO), pyAddress(destL), pyAddress(perBatch ? address(*lens) : ints),
      pyAddress(pageSize ? address(*table) : ints), pyAddress(batchIdx ? address(*batchIdx) : ints),
      pyAddress(leftpad ? address(*leftpad) : ints), pyAddress(slopesAt),
      pyAddress(finals[0]), pyAddress(finals[1]), pyAddress(finals[2]), pyAddress(news[0]), pyAddress(news[1]),
      pyInt(group * seqlenQ), pyInt(seqlenQ), pyInt(uniform + seqlenNew), pyInt(headsK), pyInt(batch),
      pyInt(splits), pyInt(left >= 0 ? left : unbounded), pyInt(right >= 0 ? right : unbounded),
      pyInt(capacity), pyInt(shapeK[0]), pyInt(seqlenNew),
      pyInt(qStrides[0]), pyInt(qStrides[1]), pyInt(qStrides[2]),
      pyInt(sk[0]), pyInt(sk[1]), pyInt(sk[2]), pyInt(sv[0]), pyInt(sv[1]), pyInt(sv[2]),
      pyInt(oStrides[0]), pyInt(oStrides[1]), pyInt(oStrides[2]), pyInt(oStrides[3]),
      pyInt(lStrides[0]), pyInt(lStrides[1]), pyInt(lStrides[2]),
      pyInt(tableStride), pyInt(ab[0]), pyInt(ab[1]),
      pyInt(finalStrides[0]), pyInt(finalStrides[1]), pyInt(finalStrides[2]), pyInt(finalStrides[3]),
      pyInt(finalStrides[4]),
      pyInt(newStrides[0]), pyInt(newStrides[1]), pyInt(newStrides[2]), pyInt(newStrides[3]),
      PyFloat_FromDouble(scale), PyFloat_FromDouble(softcap != 0 ? softcap : 1.0)});
  if (!decodeArgs)
    return nullptr;
  if (seqlenNew && !fusedAppend) {
    // The new tokens go into the cache first (kv_append; its launcher from
    // the LaunchCache _FAST_APPENDS).
    Ref append = decodeLauncher(
        names.fastAppends,
        tupleOf({Py_NewRef(dtype), pyInt(headDim), pyInt(headsK), pyInt(pageSize), newBool(perBatch),
                 newBool(batchIdx != nullptr), Py_NewRef(deviceKey.get()), Py_NewRef(priorWait)}));
    if (!append)
      return PyErr_Occurred() ? nullptr : notTaken();
    Ref appendArgs = tupleOf({
        pyAddress(address(*kn)), pyAddress(address(*vn)), pyAddress(address(kc)), pyAddress(address(vc)),
        pyAddress(perBatch ? address(*lens) : ints), pyAddress(pageSize ? address(*table) : ints),
        pyAddress(batchIdx ? address(*batchIdx) : ints), pyInt(seqlenNew), pyInt(batch), pyInt(headsK),
        pyInt(perBatch ? 0 : uniform), pyInt(capacity),
        pyInt(shapeK[0]), pyInt(skn[0]), pyInt(skn[1]), pyInt(skn[2]), pyInt(svn[0]), pyInt(svn[1]),
        pyInt(svn[2]), pyInt(sk[0]), pyInt(sk[1]), pyInt(sk[2]), pyInt(sv[0]), pyInt(sv[1]), pyInt(sv[2]),
        pyInt(tableStride)});
    Ref appendGrid = tupleOf({pyInt(seqlenNew), pyInt(batch), pyInt(1)});
    if (!appendArgs || !appendGrid ||
        !launchOn(deviceKey.get(), append.get(), appendArgs.get(), stream.get(), appendGrid.get()))
      return nullptr;
  }
  if (!launchOn(deviceKey.get(), launch, decodeArgs.get(), stream.get(), grid))
    return nullptr;
  if (parts && !fused) {
    Ref combineArgs = tupleOf({pyAddress(base), pyAddress(base + 4 * lAt), pyAddress(out),
                               pyAddress(base + 4 * lseAt), pyInt(splits), pyInt(rows), pyInt(batch),
                               pyInt(batch * hd), pyInt(hd), pyInt(headDim), pyInt(batch * rows), pyInt(rows),
                               pyInt(hd), pyInt(headDim), pyInt(rows)});
    if (!combineArgs || !launchOn(deviceKey.get(), combine, combineArgs.get(), stream.get(), combineGrid))
      return nullptr;
  }
  // (batch, seqlen_q, heads, d)
  at::Tensor result = seqlenQ == 1 ? obuf : obuf.transpose(1, 2).contiguous();
  const int returnLse = PyObject_IsTrue(returnLseo);
  if (returnLse < 0)
    return nullptr;
  if (!returnLse)
    return THPVariable_Wrap(std::move(result));
  at::Tensor lse = scratch.narrow(0, lseAt, batch * rows).view({batch, heads, seqlenQ});
  return tupleOf({THPVariable_Wrap(std::move(result)), THPVariable_Wrap(std::move(lse))}).release();
  END_HANDLE_TH_ERRORS
}

/// flash_attn's option handling (tilec.flash_attn._mask_mode):
/// the kernel's (causal, window, left, right).
struct MaskMode {
  bool causal, window;
  int64_t left, right;
};
MaskMode maskMode(bool causal, int64_t left, int64_t right, int64_t seqlenQ, int64_t seqlenK, bool alibi) {
  if (left >= seqlenK)
    left = -1;
  if (right >= seqlenK)
    right = -1;
  if (seqlenQ == 1 && !alibi)
    causal = false; // one query row sees every key either way
  if (causal)
    right = 0;
  if (right == 0)
    return {true, left >= 0, left > 0 ? left : 0, 0};
  if (left < 0 && right < 0)
    return {false, false, 0, 0};
  return {false, true, left < 0 ? seqlenK : left, right < 0 ? seqlenK : right};
}

/// flash_attn's part of a dense or varlen launch: the device's f32 and
/// int32 dummies (flash_attn._FAST_DUMMIES, made by the Python path's first
/// call) and the launcher (flash_attn._GPU_LAUNCHES[key], key as the Python
/// fast paths build it). `launch` empty: with an exception set, an error;
/// without, not taken.
struct AttnLaunch {
  Dummies dummies; // (f32 slopes, int32)
  Ref launch;
};
AttnLaunch attnLaunch(PyObject *dtype, int64_t headDim, const MaskMode &mode, bool softcap, bool alibi,
                      bool varlen, PyObject *deviceKey) {
  AttnLaunch found;
  found.dummies = deviceDummies(state.attnDict, deviceKey, "flash_attn._FAST_DUMMIES");
  if (!found.dummies.held)
    return found;
  PyObject *launches = global(state.attnDict, names.gpuLaunches);
  if (!launches)
    return found;
  Ref key = tupleOf({Py_NewRef(dtype), pyInt(headDim), newBool(mode.causal), newBool(mode.window),
                     newBool(softcap), newBool(alibi), newBool(varlen), Py_NewRef(deviceKey)});
  if (key)
    found.launch.reset(PyObject_GetItem(launches, key.get()));
  return found;
}

/// Launches `launch` with `launchArgs` on the device's current stream and
/// returns (o, lse).
PyObject *launchAndReturn(PyObject *deviceKey, PyObject *launch, PyObject *launchArgs, at::Tensor o,
                          at::Tensor lse) {
  if (!launchArgs)
    return nullptr;
  Ref stream = currentStream(deviceKey);
  if (!stream || !launchOn(deviceKey, launch, launchArgs, stream.get(), nullptr))
    return nullptr;
  return tupleOf({THPVariable_Wrap(std::move(o)), THPVariable_Wrap(std::move(lse))}).release();
}

PyObject *forwardFastPath(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 8) {
    PyErr_SetString(PyExc_TypeError,
                    "forward(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes): 8 arguments");
    return nullptr;
  }
  if (!requireModule(state.attn, "flash_attn") || !requireModule(state.runtime, "runtime"))
    return nullptr;
  PyObject *qo = args[0], *ko = args[1], *vo = args[2], *scaleo = args[3], *causalo = args[4],
           *windowo = args[5], *softcapo = args[6], *alibio = args[7];
  // The same tests, in the same order, as flash_attn._gpu_fast_path; and no
  // autograd (flash_attn._forward's route for inputs that require grad).
  PyTypeObject *kind = Py_TYPE(qo);
  int64_t windowLeft, windowRight;
  if (!plainTensor(qo) || Py_TYPE(ko) != kind || Py_TYPE(vo) != kind ||
      !windowPair(windowo, windowLeft, windowRight))
    return notTaken();
  const at::Tensor &q = THPVariable_Unpack(qo);
  const at::Tensor &k = THPVariable_Unpack(ko);
  const at::Tensor &v = THPVariable_Unpack(vo);
  if (q.requires_grad() || k.requires_grad() || v.requires_grad())
    return notTaken();
  const at::ScalarType dt = q.scalar_type();
  PyObject *dtype = dtypeName(dt);
  if (!dtype || k.scalar_type() != dt || v.scalar_type() != dt)
    return notTaken();
  if (q.dim() != 4 || k.dim() != 4 || v.sizes() != k.sizes())
    return notTaken();
  const Dims shapeQ = dims(q.sizes()), shapeK = dims(k.sizes());
  const int64_t batch = shapeQ[0], seqlenQ = shapeQ[1], heads = shapeQ[2], headDim = shapeQ[3];
  const int64_t seqlenK = shapeK[1], headsK = shapeK[2];
  int64_t maxHeadDim;
  if (!moduleInt(state.attnDict, names.maxHeadDim, maxHeadDim))
    return nullptr;
  if (shapeK[0] != batch || shapeK[3] != headDim || (headDim & 7) || !(8 <= headDim && headDim <= maxHeadDim) ||
      !(batch && seqlenQ && heads && seqlenK && headsK) || heads % headsK || windowLeft < -1 || windowRight < -1)
    return notTaken();
  const int device = deviceOf(q);
  if (device < 0 || deviceOf(k) != device || deviceOf(v) != device)
    return notTaken();
  const Dims sq = dims(q.strides()), sk = dims(k.strides()), sv = dims(v.strides());
  // Last dimension contiguous; every row 16-byte aligned (2-byte elements).
  if (sq[3] != 1 || sk[3] != 1 || sv[3] != 1 ||
      ((sq[0] | sq[1] | sq[2] | sk[0] | sk[1] | sk[2] | sv[0] | sv[1] | sv[2]) & 7) ||
      ((address(q) | address(k) | address(v)) & 15))
    return notTaken();
  double scale, softcap;
  if (!scaleAndSoftcap(scaleo, softcapo, headDim, scale, softcap))
    return notTaken();
  const at::Tensor *slopes = nullptr;
  int64_t strideAlibiB = 0;
  if (alibio != Py_None && !fastAlibi(alibio, kind, batch, heads, device, slopes, strideAlibiB))
    return notTaken();
  // _mask_mode reads causal only when more than one query row (seqlen_q) or ALiBi.
  const int causal = seqlenQ == 1 && !slopes ? 0 : PyObject_IsTrue(causalo);
  if (causal < 0)
    return nullptr;
  const MaskMode mode = maskMode(causal, windowLeft, windowRight, seqlenQ, seqlenK, slopes != nullptr);

  Ref deviceKey(pyInt(device));
  if (!deviceKey)
    return nullptr;
  AttnLaunch attn = attnLaunch(dtype, headDim, mode, softcap > 0, slopes != nullptr, /*varlen=*/false,
                               deviceKey.get());
  if (!attn.launch)
    return PyErr_Occurred() ? nullptr : notTaken();

  at::Tensor o = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({batch, heads, seqlenQ}, q.options().dtype(at::kFloat));
  const int64_t row = heads * headDim;
  Ref launchArgs = tupleOf({
      pyAddress(address(q)), pyAddress(address(k)), pyAddress(address(v)), pyAddress(address(o)),
      pyAddress(address(lse)), pyInt(seqlenQ), pyInt(seqlenK), pyInt(heads), pyInt(batch), pyInt(heads / headsK),
      pyInt(sq[0]), pyInt(sq[1]), pyInt(sq[2]), pyInt(sk[0]), pyInt(sk[1]), pyInt(sk[2]),
      pyInt(sv[0]), pyInt(sv[1]), pyInt(sv[2]),
      pyInt(seqlenQ * row), pyInt(row), pyInt(headDim), pyInt(heads * seqlenQ), pyInt(seqlenQ),
      PyFloat_FromDouble(scale), pyInt(mode.left), pyInt(mode.right), PyFloat_FromDouble(softcap > 0 ? softcap : 1.0),
      pyAddress(slopes ? address(*slopes) : attn.dummies.first), pyInt(strideAlibiB),
      pyAddress(attn.dummies.second), pyAddress(attn.dummies.second), pyAddress(attn.dummies.second), pyInt(0)});
  return launchAndReturn(deviceKey.get(), attn.launch.get(), launchArgs.get(), std::move(o), std::move(lse));
  END_HANDLE_TH_ERRORS
}

PyObject *varlenFastPath(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 12) {
    PyErr_SetString(PyExc_TypeError, "varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, "
                                     "softmax_scale, causal, window_size, softcap, alibi_slopes): 12 arguments");
    return nullptr;
  }
  if (!requireModule(state.attn, "flash_attn") || !requireModule(state.runtime, "runtime"))
    return nullptr;
  PyObject *qo = args[0], *ko = args[1], *vo = args[2], *cuqo = args[3], *cuko = args[4], *maxqo = args[5],
           *maxko = args[6], *scaleo = args[7], *causalo = args[8], *windowo = args[9], *softcapo = args[10],
           *alibio = args[11];
  // The same tests, in the same order, as flash_attn._gpu_varlen_fast_path
  // (without seqused_k: the public call's, unpaged); no autograd.
  PyObject *check = global(state.attnDict, names.checkCudaVarlenValues);
  if (!check && PyErr_Occurred())
    return nullptr;
  const int checking = check ? PyObject_IsTrue(check) : 0;
  if (checking < 0)
    return nullptr;
  PyTypeObject *kind = Py_TYPE(qo);
  int64_t windowLeft, windowRight, maxQ, maxK;
  if (checking || !plainTensor(qo) || Py_TYPE(ko) != kind || Py_TYPE(vo) != kind ||
      Py_TYPE(cuqo) != kind || Py_TYPE(cuko) != kind || !windowPair(windowo, windowLeft, windowRight) ||
      !exactInt(maxqo, maxQ) || !exactInt(maxko, maxK))
    return notTaken();
  const at::Tensor &q = THPVariable_Unpack(qo);
  const at::Tensor &k = THPVariable_Unpack(ko);
  const at::Tensor &v = THPVariable_Unpack(vo);
  const at::Tensor &cuQ = THPVariable_Unpack(cuqo);
  const at::Tensor &cuK = THPVariable_Unpack(cuko);
  if (q.requires_grad() || k.requires_grad() || v.requires_grad())
    return notTaken();
  const at::ScalarType dt = q.scalar_type();
  PyObject *dtype = dtypeName(dt);
  if (!dtype || k.scalar_type() != dt || v.scalar_type() != dt || cuQ.scalar_type() != at::kInt ||
      cuK.scalar_type() != at::kInt)
    return notTaken();
  if (q.dim() != 3 || k.dim() != 3 || v.sizes() != k.sizes() || cuQ.dim() != 1 || cuK.sizes() != cuQ.sizes())
    return notTaken();
  const int64_t totalQ = q.size(0), heads = q.size(1), headDim = q.size(2);
  const int64_t totalK = k.size(0), headsK = k.size(1), batch = cuQ.size(0) - 1;
  int64_t maxHeadDim;
  if (!moduleInt(state.attnDict, names.maxHeadDim, maxHeadDim))
    return nullptr;
  if (k.size(2) != headDim || (headDim & 7) || !(8 <= headDim && headDim <= maxHeadDim) ||
      !(totalQ && totalK && heads && headsK && batch > 0 && maxQ > 0 && maxK > 0) || heads % headsK ||
      windowLeft < -1 || windowRight < -1 || cuQ.stride(0) != 1 || cuK.stride(0) != 1)
    return notTaken();
  const int device = deviceOf(q);
  if (device < 0 || deviceOf(k) != device || deviceOf(v) != device || deviceOf(cuQ) != device ||
      deviceOf(cuK) != device)
    return notTaken();
  const Dims sq = dims(q.strides()), sk = dims(k.strides()), sv = dims(v.strides());
  if (sq[2] != 1 || sk[2] != 1 || sv[2] != 1 || ((sq[0] | sq[1] | sk[0] | sk[1] | sv[0] | sv[1]) & 7) ||
      ((address(q) | address(k) | address(v)) & 15))
    return notTaken();
  double scale, softcap;
  if (!scaleAndSoftcap(scaleo, softcapo, headDim, scale, softcap))
    return notTaken();
  const at::Tensor *slopes = nullptr;
  int64_t strideAlibiB = 0;
  if (alibio != Py_None && !fastAlibi(alibio, kind, batch, heads, device, slopes, strideAlibiB))
    return notTaken();
  // _mask_mode reads causal only when more than one query row (max_seqlen_q) or ALiBi.
  const int causal = maxQ == 1 && !slopes ? 0 : PyObject_IsTrue(causalo);
  if (causal < 0)
    return nullptr;
  const MaskMode mode = maskMode(causal, windowLeft, windowRight, maxQ, maxK, slopes != nullptr);

  // The device's error buffer (_SEQUENCE_BUFFERS[_CUDA_KEYS[device]]: [host
  // view, its address, capacity, owner tensor]), made or grown by the Python
  // path; a flag word set by an earlier call's kernel is the Python path's
  // to raise.
  PyObject *keys = global(state.attnDict, names.cudaKeys);
  PyObject *buffers = global(state.attnDict, names.sequenceBuffers);
  if (!keys || !buffers || !PyList_Check(keys) || !PyDict_Check(buffers) || device >= PyList_GET_SIZE(keys))
    return PyErr_Occurred() ? nullptr : notTaken();
  PyObject *entry = PyDict_GetItemWithError(buffers, PyList_GET_ITEM(keys, device));
  if (!entry)
    return PyErr_Occurred() ? nullptr : notTaken();
  if (!PyList_Check(entry) || PyList_GET_SIZE(entry) != 4 || !THPVariable_Check(PyList_GET_ITEM(entry, 3))) {
    PyErr_SetString(PyExc_TypeError, "flash_attn._SEQUENCE_BUFFERS: expected [view, address, capacity, tensor]");
    return nullptr;
  }
  int64_t capacity;
  if (!exactInt(PyList_GET_ITEM(entry, 2), capacity))
    return notTaken();
  const at::Tensor &owner = THPVariable_Unpack(PyList_GET_ITEM(entry, 3));
  if (capacity < batch || owner.scalar_type() != at::kInt || !owner.is_cpu() ||
      static_cast<const volatile int32_t *>(owner.data_ptr())[0] != 0)
    return notTaken();
  Ref errorsAddress(Py_NewRef(PyList_GET_ITEM(entry, 1))); // Python code runs before the launch
  Ref deviceKey(pyInt(device));
  if (!deviceKey)
    return nullptr;
  AttnLaunch attn = attnLaunch(dtype, headDim, mode, softcap > 0, slopes != nullptr, /*varlen=*/true,
                               deviceKey.get());
  if (!attn.launch)
    return PyErr_Occurred() ? nullptr : notTaken();

  at::Tensor o = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({heads, totalQ}, q.options().dtype(at::kFloat));
  const int64_t row = heads * headDim;
  // Sequence b starts at row cu_seqlens[b]: each tensor's batch stride is its row stride.
  Ref launchArgs = tupleOf({
      pyAddress(address(q)), pyAddress(address(k)), pyAddress(address(v)), pyAddress(address(o)),
      pyAddress(address(lse)), pyInt(maxQ), pyInt(maxK), pyInt(heads), pyInt(batch), pyInt(heads / headsK),
      pyInt(sq[0]), pyInt(sq[0]), pyInt(sq[1]), pyInt(sk[0]), pyInt(sk[0]), pyInt(sk[1]),
      pyInt(sv[0]), pyInt(sv[0]), pyInt(sv[1]),
      pyInt(row), pyInt(row), pyInt(headDim), pyInt(1), pyInt(totalQ),
      PyFloat_FromDouble(scale), pyInt(mode.left), pyInt(mode.right), PyFloat_FromDouble(softcap > 0 ? softcap : 1.0),
      pyAddress(slopes ? address(*slopes) : attn.dummies.first), pyInt(strideAlibiB), pyAddress(address(cuQ)),
      pyAddress(address(cuK)),
      pyAddress(attn.dummies.second),
      pyInt(0), errorsAddress.release(), pyInt(totalQ), pyInt(totalK)});
  return launchAndReturn(deviceKey.get(), attn.launch.get(), launchArgs.get(), std::move(o), std::move(lse));
  END_HANDLE_TH_ERRORS
}

void setModule(PyObject *&slot, PyObject *&dictSlot, PyObject *module) {
  Py_XSETREF(slot, Py_NewRef(module));
  dictSlot = PyModule_GetDict(module);
}

PyObject *configure(PyObject *, PyObject *args, PyObject *kwargs) {
  static const char *keywords[] = {"flash_decode", "flash_attn", "runtime", nullptr};
  PyObject *decode = nullptr, *attn = nullptr, *runtime = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOO:configure", const_cast<char **>(keywords), &decode, &attn,
                                   &runtime))
    return nullptr;
  for (PyObject **m : {&decode, &attn, &runtime}) {
    if (*m == Py_None)
      *m = nullptr; // not given
    if (*m && !PyModule_Check(*m)) {
      PyErr_SetString(PyExc_TypeError,
                      "configure(flash_decode=tilec.flash_decode, flash_attn=tilec.flash_attn, "
                      "runtime=tilec.runtime): modules");
      return nullptr;
    }
  }
  if (decode)
    setModule(state.decode, state.decodeDict, decode);
  if (attn)
    setModule(state.attn, state.attnDict, attn);
  if (runtime)
    setModule(state.runtime, state.runtimeDict, runtime);
  Py_RETURN_NONE;
}

PyObject *cpuAsCuda(PyObject *, PyObject *flag) {
  int truth = PyObject_IsTrue(flag);
  if (truth < 0)
    return nullptr;
  bool was = state.cpuAsCuda;
  state.cpuAsCuda = truth;
  return newBool(was);
}

PyMethodDef methods[] = {
    {"decode", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(decodeFastPath)), METH_FASTCALL,
     "decode(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal, window_size, "
     "softcap, num_splits, return_lse, k, v, rotary_cos, rotary_sin, rotary_interleaved, cache_batch_idx, "
     "cache_leftpad, alibi_slopes): "
     "tilec.flash_decode._gpu_fast_path in C++; None for what it does not take."},
    {"forward", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(forwardFastPath)), METH_FASTCALL,
     "forward(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes) -> (out, lse): "
     "tilec.flash_attn._gpu_fast_path in C++ for inputs that need no autograd; None for what it does not "
     "take."},
    {"varlen", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(varlenFastPath)), METH_FASTCALL,
     "varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, "
     "window_size, softcap, alibi_slopes) -> (out, lse): tilec.flash_attn._gpu_varlen_fast_path in C++ (no "
     "seqused_k) for "
     "inputs that need no autograd; None for what it does not take."},
    {"configure", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(configure)),
     METH_VARARGS | METH_KEYWORDS,
     "configure(flash_decode=None, flash_attn=None, runtime=None): the modules whose settings, plans "
     "and launchers the fast paths use (each given one replaces the previous)."},
    {"cpu_as_cuda", cpuAsCuda, METH_O,
     "cpu_as_cuda(flag) -> previous flag. Tests: CPU tensors stand for CUDA device 0 (the launches are "
     "caught, never made)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef moduleDef = {PyModuleDef_HEAD_INIT, "_tilec_fast",
                         "The O(1) GPU fast paths of flash_attn_with_kvcache, flash_attn_func and "
                         "flash_attn_varlen_func in C++ "
                         "(tilec.flash_decode.NATIVE_FAST_PATH, tilec.flash_attn.NATIVE_FAST_PATH).",
                         -1, methods, nullptr, nullptr, nullptr, nullptr};

} // namespace

PyMODINIT_FUNC PyInit__tilec_fast() {
  const std::pair<PyObject **, const char *> table[] = {
      {&names.fastPlans, "_FAST_PLANS"},         {&names.makeFastPlans, "_fast_plans"},
      {&names.fastDummies, "_FAST_DUMMIES"},     {&names.counters, "_COUNTERS"},
      {&names.nativeCounters, "_native_counters"}, {&names.fusedAppend, "FUSED_APPEND"},
      {&names.checkPagedCapacity, "CHECK_PAGED_CAPACITY"}, {&names.knobValues, "_FAST_KNOB_VALUES"},
      {&names.rawStreamVar, "_raw_stream"},      {&names.rawStream, "raw_stream"},
      {&names.launchOn, "launch_on"},            {&names.float16, "float16"},
      {&names.bfloat16, "bfloat16"},             {&names.gpuLaunches, "_GPU_LAUNCHES"},
      {&names.checkCudaVarlenValues, "CHECK_CUDA_VARLEN_VALUES"}, {&names.cudaKeys, "_CUDA_KEYS"},
      {&names.sequenceBuffers, "_SEQUENCE_BUFFERS"}, {&names.priorWait, "PRIOR_WAIT"},
      {&names.fastAppends, "_FAST_APPENDS"},     {&names.unbounded, "_UNBOUNDED"},
      {&names.maxHeadDim, "MAX_HEAD_DIM"},       {&names.fastRotaries, "_FAST_ROTARIES"},
      {&names.float32, "float32"}};
  for (const auto &[slot, text] : table)
    if (!intern(*slot, text))
      return nullptr;
  PyObject *m = PyModule_Create(&moduleDef);
  if (!m)
    return nullptr;
  if (PyModule_AddStringConstant(m, "TORCH_VERSION", TILEC_TORCH_VERSION) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
