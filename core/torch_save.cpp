// A restricted unpickler for torch.save zip archives (see torch_save.h). The zip directory is read
// with LibTorch's PyTorchStreamReader (ZIP64 included); data.pkl is interpreted here, opcode by
// opcode, into a small value tree; tensors become (storage record, offset, shape, strides).
#include "core/torch_save.h"

#include <caffe2/serialize/inline_container.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <deque>

#include "core/checked_math.h"
#include "core/errors.h"
#include "core/file_io.h"

namespace tt::torch_save {
namespace {

const char kConvertHint[] =
    "convert it to safetensors with Python: python -c \"import torch, safetensors.torch as st; "
    "sd = torch.load('IN.pt', map_location='cpu', weights_only=True); sd = sd.get('module', sd); "
    "st.save_file({k: v.contiguous() for k, v in sd.items()}, 'OUT.safetensors')\"";

// ---- values --------------------------------------------------------------------------------

// The value tree is a graph built by the file: MEMO and APPEND can make a list hold itself, or a
// chain of lists a million deep. So values are owned by one arena (Unpickler::values_) and point at
// each other with plain pointers: destroying them is one flat loop whatever the file built, where
// shared_ptr children would leak cycles and recurse once per nesting level.
struct Value {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kBytes,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor,
    kOpaque
  };
  Kind kind = Kind::kNone;
  int64_t integer = 0;
  double real = 0.0;
  std::string text;           // string, bytes, global "module.name", opaque description
  std::vector<Value*> items;  // tuple / list elements; dict: key, value, key, value, ... (last wins)
  // kStorage
  torch::Dtype dtype = torch::kFloat32;
  std::string storage_key;
  int64_t storage_numel = 0;
  // kTensor
  Value* storage = nullptr;
  int64_t storage_offset = 0;
  std::vector<int64_t> shape, strides;
  // check_graph's walk: 0 not seen, 1 on the current path, 2 done
  uint8_t visit = 0;
};

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    default:
      return "value";
  }
}

bool is_sequence(const Value* value) {
  return value->kind == Value::Kind::kTuple || value->kind == Value::Kind::kList;
}

// The storage types torch.save names in persistent ids ("torch.FloatStorage", ...).
struct StorageType {
  const char* name;
  torch::Dtype dtype;
};
const StorageType kStorageTypes[] = {
    {"torch.FloatStorage", torch::kFloat32},     {"torch.HalfStorage", torch::kFloat16},
    {"torch.BFloat16Storage", torch::kBFloat16}, {"torch.DoubleStorage", torch::kFloat64},
    {"torch.LongStorage", torch::kInt64},        {"torch.IntStorage", torch::kInt32},
    {"torch.ShortStorage", torch::kInt16},       {"torch.CharStorage", torch::kInt8},
    {"torch.ByteStorage", torch::kUInt8},        {"torch.BoolStorage", torch::kBool},
};

// ---- the unpickler -------------------------------------------------------------------------

// The pickle opcodes torch.save (protocol 2, or up to 5 when asked) can produce.
// clang-format off
enum Opcode : uint8_t {
  kMark = '(', kStop = '.', kPop = '0', kPopMark = '1', kDup = '2', kBinFloat = 'G', kBinInt = 'J',
  kBinInt1 = 'K', kBinInt2 = 'M', kNone = 'N', kBinPersId = 'Q', kReduce = 'R', kBinString = 'T',
  kShortBinString = 'U', kBinUnicode = 'X', kAppend = 'a', kBuild = 'b', kGlobal = 'c', kDict = 'd',
  kEmptyDict = '}', kAppends = 'e', kGet = 'g', kBinGet = 'h', kLongBinGet = 'j', kList = 'l',
  kEmptyList = ']', kPut = 'p', kBinPut = 'q', kLongBinPut = 'r', kSetItem = 's', kTuple = 't',
  kEmptyTuple = ')', kSetItems = 'u', kBinBytes = 'B', kShortBinBytes = 'C', kProto = 0x80,
  kNewObj = 0x81, kTuple1 = 0x85, kTuple2 = 0x86, kTuple3 = 0x87, kNewTrue = 0x88, kNewFalse = 0x89,
  kLong1 = 0x8a, kLong4 = 0x8b, kShortBinUnicode = 0x8c, kBinUnicode8 = 0x8d, kBinBytes8 = 0x8e,
  kEmptySet = 0x8f, kAddItems = 0x90, kFrozenSet = 0x91, kNewObjEx = 0x92, kStackGlobal = 0x93,
  kMemoize = 0x94, kFrame = 0x95, kByteArray8 = 0x96,
};
// clang-format on

// Limits on what one data.pkl may build. Real state dicts stay far below them (the 13B-parameter
// HunyuanVideo checkpoint: about 2,000 tensors of some 20 values and a few memo entries each,
// nested about 5 deep); they turn a hostile file into an error instead of exhausted memory.
constexpr size_t kMaxValues = size_t{1} << 23;  // about 1.6 GiB of Value
constexpr size_t kMaxStack = size_t{1} << 20;   // values on the stack; also MARKs
constexpr size_t kMaxMemo = size_t{1} << 22;
// Container nesting. Python's pickler recurses per level and stops near its recursion limit of
// 1000, so no file Python wrote is deeper.
constexpr int kMaxDepth = 1000;
// _rebuild_from_type_v2 wrapping another _rebuild_from_type_v2; torch writes one level.
constexpr int kMaxRebuildNesting = 16;

// Turns data.pkl into a value graph it owns; run() returns its root, valid while the Unpickler lives.
class Unpickler {
 public:
  Unpickler(const std::string& data, std::string where) : data_(data), where_(std::move(where)) {}

  Value* run() {
    while (true) {
      TT_CHECK(pos_ < data_.size(), ErrorCode::kCheckpoint, where_, ": pickle ends without STOP");
      uint8_t op = byte();
      if (op == kStop) break;
      step(op);
    }
    TT_CHECK(stack_.size() == 1, ErrorCode::kCheckpoint, where_, ": pickle left ", stack_.size(),
             " values on its stack");
    check_graph(stack_.back());
    return stack_.back();
  }

 private:
  // What the file built must be a tree or a DAG of bounded depth: a container that holds itself
  // (MEMOIZE, BINGET, APPEND) or a chain deeper than kMaxDepth is rejected here, once, so that no
  // later code walking the values has to guard against either. Iterative: the walk itself must
  // not recurse on file data. Each value is entered once, so the cost is linear in the graph.
  void check_graph(Value* root) {
    struct Frame {
      Value* value;
      size_t next;  // index of the next child to visit
    };
    std::vector<Frame> path = {{root, 0}};
    root->visit = 1;
    while (!path.empty()) {
      Frame& frame = path.back();
      if (frame.next == frame.value->items.size()) {
        frame.value->visit = 2;
        path.pop_back();
        continue;
      }
      Value* child = frame.value->items[frame.next++];
      if (child->visit == 2) continue;
      if (child->visit == 1)
        throw Error(
            ErrorCode::kCheckpoint,
            str_cat(where_, ": a ", kind_name(child->kind),
                    " contains itself, directly or through other containers (a reference cycle, which "
                    "torch.save never writes)"),
            kConvertHint);
      TT_CHECK_HINT(path.size() < static_cast<size_t>(kMaxDepth), ErrorCode::kCheckpoint, kConvertHint,
                    where_, ": containers nest more than ", kMaxDepth, " deep");
      child->visit = 1;
      path.push_back({child, 0});
    }
  }

  Value* make(Value::Kind kind) {
    if (values_.size() >= kMaxValues) fail(str_cat("pickle builds more than ", kMaxValues, " values"));
    Value& value = values_.emplace_back();
    value.kind = kind;
    return &value;
  }
  Value* make_text(Value::Kind kind, std::string text) {
    Value* value = make(kind);
    value->text = std::move(text);
    return value;
  }
  Value* make_int(int64_t integer) {
    Value* value = make(Value::Kind::kInt);
    value->integer = integer;
    return value;
  }

  [[noreturn]] void fail(const std::string& problem) const {
    throw Error(ErrorCode::kCheckpoint, str_cat(where_, ": ", problem, " (at byte ", pos_, ")"),
                kConvertHint);
  }

  uint8_t byte() {
    if (pos_ >= data_.size()) fail("pickle is truncated");
    return static_cast<uint8_t>(data_[pos_++]);
  }
  std::string bytes(uint64_t n) {
    if (n > data_.size() - pos_) fail("pickle is truncated");
    std::string out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  uint64_t uint_le(int n) {
    uint64_t value = 0;
    for (int i = 0; i < n; ++i) value |= static_cast<uint64_t>(byte()) << (8 * i);
    return value;
  }
  std::string line() {
    size_t end = data_.find('\n', pos_);
    if (end == std::string::npos) fail("pickle is truncated");
    std::string out = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }

  uint64_t text_index() {
    std::string digits = line();
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
      fail("malformed memo index");
    return std::stoull(digits);
  }

  void push(Value* value) {
    if (stack_.size() >= kMaxStack) fail(str_cat("pickle stack grows past ", kMaxStack, " values"));
    stack_.push_back(value);
  }
  Value* pop() {
    if (stack_.empty()) fail("pickle pops an empty stack");
    Value* value = stack_.back();
    stack_.pop_back();
    return value;
  }
  Value*& top() {
    if (stack_.empty()) fail("pickle reads an empty stack");
    return stack_.back();
  }
  std::vector<Value*> pop_mark() {
    if (marks_.empty()) fail("pickle has no MARK");
    size_t start = marks_.back();
    marks_.pop_back();
    if (start > stack_.size()) fail("pickle MARK is past the stack");
    std::vector<Value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(start), stack_.end());
    stack_.resize(start);
    return items;
  }
  void memo_put(uint64_t index) {
    if (memo_.size() >= kMaxMemo && memo_.count(index) == 0)
      fail(str_cat("pickle memo grows past ", kMaxMemo, " entries"));
    memo_[index] = top();
  }
  void memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail(str_cat("pickle reads memo entry ", index, ", which was never written"));
    push(it->second);
  }

  Value* tuple_of(std::vector<Value*> items) {
    Value* tuple = make(Value::Kind::kTuple);
    tuple->items = std::move(items);
    return tuple;
  }

  void add_items(Value* container, const std::vector<Value*>& items) {
    if (container->kind == Value::Kind::kList)
      container->items.insert(container->items.end(), items.begin(), items.end());
    // anything else (an opaque object built by NEWOBJ): its contents are not needed
  }
  void set_items(Value* container, const std::vector<Value*>& items) {
    if (items.size() % 2 != 0) fail("pickle SETITEMS has an odd number of values");
    if (container->kind == Value::Kind::kDict)
      container->items.insert(container->items.end(), items.begin(), items.end());
  }

  Value* persistent_load(Value* pid) {
    if (pid->kind != Value::Kind::kTuple || pid->items.size() < 5 ||
        pid->items[0]->kind != Value::Kind::kString || pid->items[0]->text != "storage")
      fail("unsupported persistent id (only tensor storages are supported)");
    Value* type = pid->items[1];
    Value* key = pid->items[2];
    Value* numel = pid->items[4];
    if (type->kind != Value::Kind::kGlobal || key->kind != Value::Kind::kString ||
        numel->kind != Value::Kind::kInt)
      fail("malformed storage persistent id");
    Value* storage = make(Value::Kind::kStorage);
    bool known = false;
    for (const StorageType& entry : kStorageTypes) {
      if (type->text == entry.name) {
        storage->dtype = entry.dtype;
        known = true;
      }
    }
    if (!known)
      fail(str_cat("storage type ", type->text,
                   " is not supported (floating point and integer storages are)"));
    storage->storage_key = key->text;
    storage->storage_numel = numel->integer;
    return storage;
  }

  std::vector<int64_t> int_tuple(Value* value, const char* what) {
    if (!is_sequence(value)) fail(str_cat("tensor ", what, " is not a tuple"));
    std::vector<int64_t> out;
    for (Value* item : value->items) {
      if (item->kind != Value::Kind::kInt) fail(str_cat("tensor ", what, " holds a non-integer"));
      out.push_back(item->integer);
    }
    return out;
  }

  Value* rebuild_tensor(Value* args) {
    if (args->kind != Value::Kind::kTuple || args->items.size() < 4) fail("malformed tensor arguments");
    Value* storage = args->items[0];
    if (storage->kind != Value::Kind::kStorage) fail("tensor argument is not a storage");
    if (args->items[1]->kind != Value::Kind::kInt) fail("tensor storage offset is not an integer");
    Value* tensor = make(Value::Kind::kTensor);
    tensor->storage = storage;
    tensor->storage_offset = args->items[1]->integer;
    tensor->shape = int_tuple(args->items[2], "size");
    tensor->strides = int_tuple(args->items[3], "stride");
    if (tensor->shape.size() != tensor->strides.size()) fail("tensor size and stride differ in length");
    return tensor;
  }

  // REDUCE: applies a known global to its arguments; anything else gives an opaque value.
  // _rebuild_from_type_v2(func, type, args, state) calls func(*args): a loop, not recursion, since
  // the file chooses func and args (a list holding itself would otherwise recurse forever).
  Value* call(Value* callable, Value* args) {
    for (int nesting = 0;; ++nesting) {
      if (callable->kind != Value::Kind::kGlobal) return make_text(Value::Kind::kOpaque, "result of a call");
      const std::string& name = callable->text;
      if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor")
        return rebuild_tensor(args);
      if (name == "collections.OrderedDict" || name == "collections.defaultdict" || name == "builtins.dict")
        return make(Value::Kind::kDict);  // torch only ever writes OrderedDict() (items follow via SETITEMS)
      bool first_argument = name == "torch._utils._rebuild_parameter" ||
                            name == "torch._utils._rebuild_parameter_with_state" ||
                            name == "torch.jit._pickle.restore_type_tag" || name == "torch.Size";
      if (first_argument && is_sequence(args) && !args->items.empty()) return args->items[0];
      if (name == "torch._tensor._rebuild_from_type_v2" && is_sequence(args) && args->items.size() >= 3) {
        if (nesting == kMaxRebuildNesting)
          fail(str_cat("_rebuild_from_type_v2 nests more than ", kMaxRebuildNesting,
                       " deep (do its arguments refer to themselves?)"));
        callable = args->items[0];
        args = args->items[2];
        continue;
      }
      return make_text(Value::Kind::kOpaque, name);
    }
  }

  void step(uint8_t op) {
    using K = Value::Kind;
    switch (op) {
      case kProto:
        byte();
        break;
      case kFrame:  // a length hint only
        uint_le(8);
        break;
      case kMark:
        if (marks_.size() >= kMaxStack) fail(str_cat("pickle has more than ", kMaxStack, " open MARKs"));
        marks_.push_back(stack_.size());
        break;
      case kPop:
        pop();
        break;
      case kPopMark:
        pop_mark();
        break;
      case kDup:
        push(top());
        break;
      case kNone:
        push(make(K::kNone));
        break;
      case kNewTrue:
      case kNewFalse: {
        Value* value = make(K::kBool);
        value->integer = op == kNewTrue;
        push(value);
      } break;
      case kBinInt:
        push(make_int(static_cast<int32_t>(uint_le(4))));
        break;
      case kBinInt1:
        push(make_int(static_cast<int64_t>(uint_le(1))));
        break;
      case kBinInt2:
        push(make_int(static_cast<int64_t>(uint_le(2))));
        break;
      case kLong1:
      case kLong4: {  // little-endian two's complement of n bytes
        uint64_t n = op == kLong1 ? uint_le(1) : uint_le(4);
        if (n > 8) {
          bytes(n);
          push(make_text(K::kOpaque, "big integer"));
          break;
        }
        uint64_t raw = n > 0 ? uint_le(static_cast<int>(n)) : 0;
        if (n > 0 && n < 8 && ((raw >> (8 * n - 1)) & 1)) raw |= ~uint64_t{0} << (8 * n);  // sign-extend
        push(make_int(static_cast<int64_t>(raw)));
      } break;
      case kBinFloat: {  // big-endian double
        uint64_t raw = 0;
        for (int i = 0; i < 8; ++i) raw = (raw << 8) | byte();
        Value* value = make(K::kFloat);
        std::memcpy(&value->real, &raw, 8);
        push(value);
      } break;
      case kBinUnicode:
      case kBinString:
        push(make_text(K::kString, bytes(uint_le(4))));
        break;
      case kShortBinUnicode:
      case kShortBinString:
        push(make_text(K::kString, bytes(uint_le(1))));
        break;
      case kBinUnicode8:
        push(make_text(K::kString, bytes(uint_le(8))));
        break;
      case kBinBytes:
        push(make_text(K::kBytes, bytes(uint_le(4))));
        break;
      case kShortBinBytes:
        push(make_text(K::kBytes, bytes(uint_le(1))));
        break;
      case kBinBytes8:
      case kByteArray8:
        push(make_text(K::kBytes, bytes(uint_le(8))));
        break;
      case kEmptyTuple:
        push(make(K::kTuple));
        break;
      case kTuple:
        push(tuple_of(pop_mark()));
        break;
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        size_t n = op - kTuple1 + 1u;
        if (stack_.size() < n) fail("pickle TUPLE needs more values");
        std::vector<Value*> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
        stack_.resize(stack_.size() - n);
        push(tuple_of(std::move(items)));
      } break;
      case kEmptyList:
      case kEmptySet:  // sets are kept as lists
        push(make(K::kList));
        break;
      case kList:
      case kFrozenSet: {
        Value* list = make(K::kList);
        list->items = pop_mark();
        push(list);
      } break;
      case kAppend: {
        Value* item = pop();
        add_items(top(), {item});
      } break;
      case kAppends:
      case kAddItems: {
        std::vector<Value*> items = pop_mark();
        add_items(top(), items);
      } break;
      case kEmptyDict:
        push(make(K::kDict));
        break;
      case kDict: {
        Value* dict = make(K::kDict);
        set_items(dict, pop_mark());
        push(dict);
      } break;
      case kSetItem: {
        Value* value = pop();
        Value* key = pop();
        set_items(top(), {key, value});
      } break;
      case kSetItems: {
        std::vector<Value*> items = pop_mark();
        set_items(top(), items);
      } break;
      case kGlobal: {  // "module\nname\n"
        std::string module = line();
        std::string name = line();
        push(make_text(K::kGlobal, module + "." + name));
      } break;
      case kStackGlobal: {
        Value* name = pop();
        Value* module = pop();
        if (name->kind != K::kString || module->kind != K::kString) fail("STACK_GLOBAL needs two strings");
        push(make_text(K::kGlobal, module->text + "." + name->text));
      } break;
      case kReduce: {
        Value* args = pop();
        Value* callable = pop();
        push(call(callable, args));
      } break;
      case kNewObj: {  // cls.__new__(cls, *args): nothing teletron needs
        pop();
        Value* cls = pop();
        push(make_text(K::kOpaque, cls->kind == K::kGlobal ? cls->text : "object"));
      } break;
      case kNewObjEx: {
        pop();
        pop();
        Value* cls = pop();
        push(make_text(K::kOpaque, cls->kind == K::kGlobal ? cls->text : "object"));
      } break;
      case kBuild:  // the state (e.g. a state dict's _metadata) is not needed
        pop();
        break;
      case kBinPersId:
        push(persistent_load(pop()));
        break;
      case kBinPut:
        memo_put(uint_le(1));
        break;
      case kLongBinPut:
        memo_put(uint_le(4));
        break;
      case kMemoize:
        memo_put(memo_.size());
        break;
      case kBinGet:
        memo_get(uint_le(1));
        break;
      case kLongBinGet:
        memo_get(uint_le(4));
        break;
      case kPut:
        memo_put(text_index());
        break;
      case kGet:
        memo_get(text_index());
        break;
      default:
        fail(str_cat("unsupported pickle opcode ", static_cast<int>(op), " ('", static_cast<char>(op), "')"));
    }
  }

  const std::string& data_;
  std::string where_;
  size_t pos_ = 0;
  std::deque<Value> values_;  // owns every value; a deque never moves them
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, Value*> memo_;
};

// ---- the archive ---------------------------------------------------------------------------

// data.pkl is read into memory whole; a zip directory claiming more is damaged or hostile. Real
// state-dict pickles are a few MB (the tensors themselves live in other records).
constexpr uint64_t kMaxPickleBytes = uint64_t{1} << 30;

int64_t element_size(torch::Dtype dtype) {
  return static_cast<int64_t>(c10::elementSize(dtype));
}

int64_t file_size_of(const std::string& path) {
  struct stat st {};
  TT_CHECK(::stat(path.c_str(), &st) == 0, ErrorCode::kIo, "cannot stat ", path, ": ", std::strerror(errno));
  return static_cast<int64_t>(st.st_size);
}

// Reads `n` bytes at `offset` of the file (the zip local header of a record).
void read_at(const std::string& path, int64_t offset, void* out, size_t n) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TT_CHECK(fd >= 0, ErrorCode::kIo, "cannot open ", path, ": ", std::strerror(errno));
  ssize_t got = ::pread(fd, out, n, offset);
  ::close(fd);
  TT_CHECK(got == static_cast<ssize_t>(n), ErrorCode::kCheckpoint, path, ": zip record header at byte ",
           offset, " is truncated");
}

// The dict the state dict lives in, and the key it was found under.
const Value* find_state_dict(const Value* root, const std::vector<std::string>& container_keys,
                             std::string* container_key) {
  if (root->kind != Value::Kind::kDict) return nullptr;
  for (const std::string& wanted : container_keys) {
    for (size_t i = root->items.size(); i >= 2; i -= 2) {  // last assignment wins
      const Value* key = root->items[i - 2];
      const Value* value = root->items[i - 1];
      if (key->kind == Value::Kind::kString && key->text == wanted) {
        if (value->kind != Value::Kind::kDict) break;
        *container_key = wanted;
        return value;
      }
    }
  }
  return root;
}

std::string top_level_keys(const Value* root) {
  if (root->kind != Value::Kind::kDict) return "the file holds no dict";
  std::string out;
  for (size_t i = 0; i + 1 < root->items.size(); i += 2) {
    if (root->items[i]->kind != Value::Kind::kString) continue;
    if (!out.empty()) out += ", ";
    out += root->items[i]->text;
  }
  return "top-level keys: " + (out.empty() ? std::string("none") : out);
}

// Where a storage record's bytes lie, from the zip directory, checked against the file.
struct RecordSpan {
  int64_t offset = 0;  // of the first data byte
  int64_t size = 0;
};

RecordSpan locate_record(caffe2::serialize::PyTorchStreamReader& reader, const std::string& path,
                         const std::string& where, const std::string& record, int64_t file_size) {
  uint64_t offset = 0, size = 0, header_offset = 0;
  try {
    TT_CHECK_HINT(reader.hasRecord(record), ErrorCode::kCheckpoint, kConvertHint, where, ": storage record ",
                  record, " is missing");
    offset = reader.getRecordOffset(record);
    size = reader.getRecordSize(record);
    header_offset = reader.getRecordHeaderOffset(record);
  } catch (const c10::Error& error) {
    throw Error(ErrorCode::kCheckpoint, str_cat(where, ": ", error.what_without_backtrace()), kConvertHint);
  }
  // The directory's numbers are unsigned and file-controlled: compared in uint64 first so that none
  // wraps negative when it becomes an int64 offset.
  uint64_t limit = static_cast<uint64_t>(file_size);
  TT_CHECK_HINT(header_offset < limit && offset <= limit && size <= limit - offset, ErrorCode::kCheckpoint,
                kConvertHint, where, ": zip directory puts storage record ", record, " at bytes [", offset,
                ", ", offset + size, ") of a ", file_size,
                "-byte file (truncated file, or a zip directory whose sizes lie)");
  uint8_t local_header[10] = {};
  read_at(path, static_cast<int64_t>(header_offset), local_header, sizeof(local_header));
  uint16_t method = static_cast<uint16_t>(local_header[8] | (local_header[9] << 8));
  TT_CHECK_HINT(method == 0, ErrorCode::kCheckpoint, kConvertHint, where, ": storage record ", record,
                " is compressed (method ", method, "); torch.save never compresses, was the file re-zipped?");
  return {static_cast<int64_t>(offset), static_cast<int64_t>(size)};
}

// Checks one tensor against its storage and its record, all in checked arithmetic, and returns
// where it lies in the file.
TensorRecord locate_tensor(const Value& tensor, const RecordSpan& span, const std::string& where) {
  const Value& storage = *tensor.storage;
  const ErrorCode code = ErrorCode::kCheckpoint;
  int64_t elem = element_size(storage.dtype);
  TT_CHECK_HINT(storage.storage_numel >= 0, code, kConvertHint, where, ": storage has a negative size (",
                storage.storage_numel, " elements)");
  int64_t storage_bytes = checked_mul(storage.storage_numel, elem, code, where + ": storage byte size");
  TT_CHECK_HINT(storage_bytes <= span.size, code, kConvertHint, where, ": storage of ", storage.storage_numel,
                " elements (", storage_bytes, " bytes) does not fit its ", span.size,
                "-byte record (truncated file?)");
  // Both bound the view: the extent what it reads, the element count what a copy of it allocates
  // (stride 0 lets a one-element storage back a view of 2^80 elements).
  int64_t extent = checked_strided_extent(tensor.shape, tensor.strides, tensor.storage_offset, code, where);
  checked_numel(tensor.shape, code, where);
  if (extent == 0) {
    TT_CHECK_HINT(tensor.storage_offset <= storage.storage_numel, code, kConvertHint, where,
                  ": storage offset ", tensor.storage_offset, " is past its storage of ",
                  storage.storage_numel, " elements");
  } else {
    TT_CHECK_HINT(extent <= storage.storage_numel, code, kConvertHint, where, ": size ",
                  shape_string(tensor.shape), ", stride ", shape_string(tensor.strides), " and offset ",
                  tensor.storage_offset, " reach element ", extent - 1, " of a storage of ",
                  storage.storage_numel, " elements");
  }
  TensorRecord record;
  record.dtype = storage.dtype;
  record.shape = tensor.shape;
  record.strides = tensor.strides;
  // Cannot overflow after the checks above (offset <= numel, numel * elem <= record <= file), but
  // stays checked so that the reasoning need not be redone when the checks change.
  record.file_offset = checked_add(span.offset, checked_mul(tensor.storage_offset, elem, code, where), code,
                                   where + ": file offset");
  return record;
}

}  // namespace

bool is_zip_file(const std::string& path) {
  char magic[4] = {};
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t got = ::pread(fd, magic, 4, 0);
  ::close(fd);
  return got == 4 && std::memcmp(magic, "PK\x03\x04", 4) == 0;
}

StateDict read_state_dict(const std::string& path, const std::vector<std::string>& container_keys) {
  {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    TT_CHECK(fd >= 0, ErrorCode::kIo, "cannot open ", path, ": ", std::strerror(errno));
    ::close(fd);
  }
  if (!is_zip_file(path)) {
    throw Error(ErrorCode::kCheckpoint,
                str_cat(path,
                        ": not a torch.save zip archive (a legacy pre-1.6 torch.save file, or not a "
                        "PyTorch file at all); teletron reads the zip format and safetensors"),
                kConvertHint);
  }
  int64_t file_size = file_size_of(path);
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  std::string pickle;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    if (!reader->hasRecord("data.pkl")) {
      throw Error(ErrorCode::kCheckpoint,
                  str_cat(path, ": zip archive has no data.pkl (not written by torch.save)"), kConvertHint);
    }
    // Checked before getRecord allocates the size the directory claims.
    uint64_t claimed = reader->getRecordSize("data.pkl");
    TT_CHECK_HINT(claimed <= kMaxPickleBytes && claimed <= static_cast<uint64_t>(file_size),
                  ErrorCode::kCheckpoint, kConvertHint, path, ": zip directory says data.pkl is ", claimed,
                  " bytes (the file is ", file_size, " bytes; the limit is ", kMaxPickleBytes, ")");
    auto [data, size] = reader->getRecord("data.pkl");
    pickle.assign(static_cast<const char*>(data.get()), size);
  } catch (const c10::Error& error) {
    throw Error(ErrorCode::kCheckpoint,
                str_cat(path, ": cannot read the zip archive: ", error.what_without_backtrace()),
                kConvertHint);
  }

  Unpickler unpickler(pickle, path + ": data.pkl");  // owns the values `root` points into
  const Value* root = unpickler.run();
  StateDict result;
  const Value* dict = find_state_dict(root, container_keys, &result.container_key);
  TT_CHECK_HINT(dict != nullptr, ErrorCode::kCheckpoint, kConvertHint, path, ": holds no dict of tensors (",
                top_level_keys(root), ")");

  for (size_t i = 0; i + 1 < dict->items.size(); i += 2) {
    const Value* key = dict->items[i];
    const Value* value = dict->items[i + 1];
    if (key->kind != Value::Kind::kString || value->kind != Value::Kind::kTensor) continue;
    std::string where = str_cat(path, ": tensor \"", key->text, "\"");
    std::string record = "data/" + value->storage->storage_key;
    RecordSpan span = locate_record(*reader, path, where, record, file_size);
    result.tensors[key->text] = locate_tensor(*value, span, where);
  }
  TT_CHECK_HINT(!result.tensors.empty(), ErrorCode::kCheckpoint, kConvertHint, path, ": holds no tensors",
                result.container_key.empty() ? "" : str_cat(" under \"", result.container_key, "\""), " (",
                top_level_keys(root), ")");
  return result;
}

}  // namespace tt::torch_save
