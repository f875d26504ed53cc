#include "core/encoding/pickle_globals.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <string>

namespace ckptfs {
namespace {

// Every table is sorted for binary search (checked by static_assert below).

// Modules denied with everything under them, by family.
constexpr std::string_view kDeniedModules[] = {
    "IPython",             // get_ipython().system
    "_aix_support",        // runs commands
    "_bootsubprocess",     // runs commands
    "_ctypes",             // calls any C function
    "_imp",                // imports
    "_io",                 // opens files
    "_multiprocessing",    // processes
    "_osx_support",        // _read_output runs a command
    "_pickle",             // loads pickles
    "_posixshmem",         // shared memory by name
    "_posixsubprocess",    // runs commands
    "_socket",             // network
    "_thread",             // starts threads
    "_tkinter",            // Tcl eval
    "_winapi",             // processes
    "_winreg",             // registry
    "aifc",                // opens files by path
    "antigravity",         // opens a browser
    "asynchat",            // network
    "asyncio",             // processes, network
    "asyncore",            // network
    "atexit",              // registers callables
    "bdb",                 // runs code
    "bz2",                 // opens files
    "cPickle",             // loads pickles
    "cProfile",            // runs code
    "cffi",                // compiles and calls C
    "cgi",                 // reads files
    "cgitb",               // writes log files
    "cloudpickle",         // loads pickles
    "code",                // runs code
    "codeop",              // compiles code
    "commands",            // runs commands (Python 2)
    "compileall",          // compiles and writes files
    "concurrent",          // processes
    "ctypes",              // calls any C function
    "dbm",                 // opens files
    "dill",                // loads pickles
    "distutils",           // runs commands
    "doctest",             // runs code
    "ensurepip",           // runs pip
    "fcntl",               // ioctl on any descriptor
    "filecmp",             // opens files by path
    "fileinput",           // opens files
    "ftplib",              // network
    "glob",                // lists files
    "gzip",                // opens files
    "h5py",                // opens and creates files
    "http",                // network
    "idlelib",             // runs code
    "imaplib",             // IMAP4_stream runs a command
    "imp",                 // imports
    "importlib",           // imports
    "importlib_metadata",  // imports entry points
    "io",                  // opens files
    "joblib",              // loads pickles
    "jsonpickle",          // loads objects
    "lib2to3",             // rewrites files
    "linecache",           // opens files
    "lzma",                // opens files
    "mailbox",             // opens and creates files
    "mailcap",             // runs commands
    "marshal",             // loads code
    "mimetypes",           // opens files by path
    "mmap",                // maps files
    "modulefinder",        // compiles code
    "msvcrt",              // processes
    "multiprocessing",     // processes
    "netrc",               // opens files by path
    "nntplib",             // network
    "nt",                  // os on Windows
    "operator",            // attrgetter, methodcaller: getattr by another name
    "os",                  // processes, files
    "pdb",                 // runs code
    "pexpect",             // runs commands
    "pickle",              // loads pickles
    "pip",                 // runs commands
    "pipes",               // runs commands
    "pkg_resources",       // imports entry points
    "pkgutil",             // imports
    "platform",            // runs commands
    "popen2",              // runs commands (Python 2)
    "poplib",              // network
    "posix",               // os on POSIX
    "profile",             // runs code
    "pty",                 // runs commands
    "py_compile",          // compiles and writes files
    "pyclbr",              // imports
    "pydoc",               // imports (locate), runs a pager
    "readline",            // opens history files by path
    "requests",            // network
    "resource",            // process limits
    "runpy",               // runs code
    "setuptools",          // runs commands
    "sh",                  // runs commands
    "shelve",              // loads pickles from files
    "shutil",              // copies, removes files
    "signal",              // signals
    "site",                // .pth files run code
    "smtpd",               // network
    "smtplib",             // network
    "socket",              // network
    "socketserver",        // network
    "sqlite3",             // opens files
    "ssl",                 // network
    "subprocess",          // runs commands
    "sunau",               // opens files by path
    "sys",                 // the interpreter
    "tabnanny",            // opens files by path
    "tarfile",             // opens, extracts files
    "telnetlib",           // network
    "tempfile",            // creates files
    "threading",           // starts threads
    "timeit",              // runs code
    "tkinter",             // Tcl eval
    "trace",               // runs code
    "turtle",              // Tk
    "types",               // code and function objects (but SimpleNamespace)
    "urllib",              // network
    "urllib3",             // network
    "venv",                // runs commands
    "wave",                // opens files by path
    "webbrowser",          // runs commands
    "winreg",              // registry
    "wsgiref",             // network
    "xmlrpc",              // network
    "yaml",                // loads Python objects
    "zipapp",              // creates files
    "zipfile",             // opens files
    "zipimport",           // imports
};

// Functions (and modules) inside otherwise harmless packages.
constexpr std::string_view kDeniedGlobals[] = {
    "codecs.open",
    "inspect.getattr_static",  // getattr by another name
    "keras.models.load_model",
    "keras.saving",
    "logging.FileHandler",  // creates files
    "logging.basicConfig",  // creates files (filename=)
    "logging.config",       // dictConfig / fileConfig / listen import and run code
    "logging.handlers",     // files, sockets, SMTP
    "numpy.DataSource",
    "numpy._core.memmap",
    "numpy._core.multiarray.fromfile",
    "numpy._core.records",  // fromfile
    "numpy.core.memmap",
    "numpy.core.multiarray.fromfile",
    "numpy.core.records",
    "numpy.ctypeslib",
    "numpy.distutils",
    "numpy.f2py",
    "numpy.fromfile",
    "numpy.fromregex",
    "numpy.genfromtxt",
    "numpy.lib._datasource",  // open: files and URLs
    "numpy.lib._npyio_impl",  // numpy 2's npyio
    "numpy.lib.format",       // open_memmap, read_array (allow_pickle)
    "numpy.lib.npyio",
    "numpy.load",
    "numpy.loadtxt",
    "numpy.memmap",
    "numpy.rec",
    "numpy.recfromcsv",
    "numpy.recfromtxt",
    "numpy.save",
    "numpy.savetxt",
    "numpy.savez",
    "numpy.savez_compressed",
    "numpy.testing",
    "pandas.io",
    "pandas.read_pickle",
    "safetensors.numpy.load_file",
    "safetensors.numpy.save_file",
    "safetensors.safe_open",
    "safetensors.torch.load_file",
    "safetensors.torch.save_file",
    "tensorflow.io",
    "tensorflow.keras.models.load_model",
    "tensorflow.saved_model",
    "tokenize.open",
    "torch._C",
    "torch._dynamo",
    "torch._inductor",  // compiles and loads code
    "torch._utils._import_dotted_name",
    "torch.classes",
    "torch.compile",
    "torch.distributed.elastic",
    "torch.distributed.launch",
    "torch.distributed.rpc",
    "torch.distributed.run",
    "torch.export.load",
    "torch.export.save",
    "torch.from_file",        // maps a file by path
    "torch.fx.graph_module",  // _forward_from_src execs source text
    "torch.hub",
    "torch.jit",
    "torch.library",
    "torch.load",
    "torch.multiprocessing",
    "torch.ops",
    "torch.package",
    "torch.save",
    "torch.serialization._legacy_load",
    "torch.serialization._legacy_save",
    "torch.serialization._load",
    "torch.serialization._open_file",
    "torch.serialization._open_file_like",
    "torch.serialization._open_zipfile_reader",
    "torch.serialization._open_zipfile_writer",
    "torch.serialization._save",
    "torch.serialization.load",
    "torch.serialization.save",
    "torch.storage._load_from_bytes",  // an unrestricted torch.load of the bytes it is given
    "torch.utils.benchmark",           // compiles C++
    "torch.utils.collect_env",         // run: runs a command
    "torch.utils.cpp_extension",
    "torch.utils.tensorboard",  // creates files
    "uuid._get_command_stdout",
    "xml.dom",  // parse by path, external entities
    "xml.etree.ElementInclude",
    "xml.etree.ElementTree.iterparse",
    "xml.etree.ElementTree.parse",
    "xml.etree.cElementTree",
    "xml.sax",
};

constexpr std::string_view kDeniedBuiltins[] = {
    "__import__", "apply", "breakpoint", "compile",   "delattr", "eval",    "exec",
    "execfile",   "exit",  "file",       "getattr",   "globals", "help",    "input",
    "locals",     "open",  "quit",       "raw_input", "reload",  "setattr", "vars",
};

// Names of builtins as an attribute: the module, Python 2's, and every module's
// __builtins__ (a module or its dict).
constexpr std::string_view kBuiltinsNames[] = {"__builtin__", "__builtins__", "builtins"};

// Attributes no checkpoint's dotted name walks through (a nested class's qualname never
// does): introspection that reaches other namespaces, and methods that open, write or load
// by path or run commands (pathlib.Path.write_text, numpy.ndarray.tofile, OmegaConf.load,
// X.from_pretrained). Judged on name components past the first.
constexpr std::string_view kDeniedAttributes[] = {
    "__base__",
    "__bases__",
    "__builtins__",
    "__call__",
    "__class__",
    "__closure__",
    "__code__",
    "__dict__",
    "__func__",
    "__getattribute__",
    "__globals__",
    "__import__",
    "__init_subclass__",
    "__loader__",
    "__mro__",
    "__reduce__",
    "__reduce_ex__",
    "__self__",
    "__spec__",
    "__subclasses__",
    "__wrapped__",
    "chmod",
    "dump",
    "eval",
    "exec",
    "from_file",
    "from_pretrained",
    "fromfile",
    "hardlink_to",
    "load",
    "load_model",
    "mkdir",
    "open",
    "popen",
    "read_pickle",
    "rename",
    "rmdir",
    "save",
    "save_pretrained",
    "symlink_to",
    "system",
    "to_pickle",
    "tofile",
    "touch",
    "unlink",
    "write_bytes",
    "write_text",
};

template <size_t N>
constexpr bool Sorted(const std::string_view (&table)[N]) {
  return std::is_sorted(std::begin(table), std::end(table));
}
static_assert(Sorted(kDeniedModules) && Sorted(kDeniedGlobals) && Sorted(kDeniedBuiltins));
static_assert(Sorted(kBuiltinsNames));

template <size_t N>
bool Holds(const std::string_view (&table)[N], std::string_view name) {
  return std::binary_search(std::begin(table), std::end(table), name);
}

// Whether a sorted table holds `path` or an entry `path` lies under. An entry `path` lies
// under sorts before it, but other names may sort between them ("os" < "os-x" < "os.path"),
// so each proper prefix of `path` at a '.' is looked up.
template <size_t N>
bool UnderAny(const std::string_view (&table)[N], std::string_view path) {
  for (size_t end = 0; end != std::string_view::npos;) {
    end = path.find('.', end + 1);
    if (Holds(table, path.substr(0, end))) return true;
  }
  return false;
}

// A module-rooted dotted path, as if `import` named its first components.
bool DeniedPath(std::string_view path) {
  const size_t dot = path.find('.');
  if (dot != std::string_view::npos && Holds(kBuiltinsNames, path.substr(0, dot))) {
    const std::string_view rest = path.substr(dot + 1);
    if (Holds(kDeniedBuiltins, rest.substr(0, rest.find('.')))) return true;
  }
  if (path == "types.SimpleNamespace") return false;
  return UnderAny(kDeniedModules, path) || UnderAny(kDeniedGlobals, path);
}

// Judging every suffix costs the square of the dots; no module path or qualname has many.
constexpr size_t kMaxDots = 64;

bool DeniedPair(std::string_view module, std::string_view name) {
  std::string full;
  full.append(module).append(".").append(name);
  if (static_cast<size_t>(std::count(full.begin(), full.end(), '.')) > kMaxDots) return true;
  if (DeniedPath(full)) return true;
  // Each suffix from a name component on: what an attribute walk may alias.
  size_t start = module.size() + 1;
  for (size_t component = 0; start < full.size(); ++component) {
    const size_t end = std::min(full.find('.', start), full.size());
    if (component > 0 &&
        Holds(kDeniedAttributes, std::string_view(full).substr(start, end - start)))
      return true;
    if (end < full.size() && DeniedPath(std::string_view(full).substr(start))) return true;
    start = end + 1;
  }
  return false;
}

// _compat_pickle (Lib/_compat_pickle.py) as Python 3.11 has it. IMPORT_MAPPING: Python 2
// module -> Python 3 module.
constexpr std::pair<std::string_view, std::string_view> kImportMapping[] = {
    {"BaseHTTPServer", "http.server"},
    {"CGIHTTPServer", "http.server"},
    {"ConfigParser", "configparser"},
    {"Cookie", "http.cookies"},
    {"Dialog", "tkinter.dialog"},
    {"DocXMLRPCServer", "xmlrpc.server"},
    {"FileDialog", "tkinter.filedialog"},
    {"HTMLParser", "html.parser"},
    {"Queue", "queue"},
    {"ScrolledText", "tkinter.scrolledtext"},
    {"SimpleDialog", "tkinter.simpledialog"},
    {"SimpleHTTPServer", "http.server"},
    {"SimpleXMLRPCServer", "xmlrpc.server"},
    {"SocketServer", "socketserver"},
    {"StringIO", "io"},
    {"Tix", "tkinter.tix"},
    {"Tkconstants", "tkinter.constants"},
    {"Tkdnd", "tkinter.dnd"},
    {"Tkinter", "tkinter"},
    {"UserDict", "collections"},
    {"UserList", "collections"},
    {"UserString", "collections"},
    {"__builtin__", "builtins"},
    {"_abcoll", "collections.abc"},
    {"_elementtree", "xml.etree.ElementTree"},
    {"_winreg", "winreg"},
    {"anydbm", "dbm"},
    {"cPickle", "pickle"},
    {"cStringIO", "io"},
    {"commands", "subprocess"},
    {"cookielib", "http.cookiejar"},
    {"copy_reg", "copyreg"},
    {"dbhash", "dbm.bsd"},
    {"dbm", "dbm.ndbm"},
    {"dumbdbm", "dbm.dumb"},
    {"dummy_thread", "_dummy_thread"},
    {"gdbm", "dbm.gnu"},
    {"htmlentitydefs", "html.entities"},
    {"httplib", "http.client"},
    {"markupbase", "_markupbase"},
    {"repr", "reprlib"},
    {"robotparser", "urllib.robotparser"},
    {"test.test_support", "test.support"},
    {"thread", "_thread"},
    {"tkColorChooser", "tkinter.colorchooser"},
    {"tkCommonDialog", "tkinter.commondialog"},
    {"tkFileDialog", "tkinter.filedialog"},
    {"tkFont", "tkinter.font"},
    {"tkMessageBox", "tkinter.messagebox"},
    {"tkSimpleDialog", "tkinter.simpledialog"},
    {"ttk", "tkinter.ttk"},
    {"urllib2", "urllib.request"},
    {"urlparse", "urllib.parse"},
    {"whichdb", "dbm"},
    {"xmlrpclib", "xmlrpc.client"},
};

struct NameRename {
  std::string_view module, name, to_module, to_name;
};
// NAME_MAPPING, less its exception entries (below): (module, name) -> (module, name).
constexpr NameRename kNameMapping[] = {
    {"UserDict", "IterableUserDict", "collections", "UserDict"},
    {"UserDict", "UserDict", "collections", "UserDict"},
    {"UserList", "UserList", "collections", "UserList"},
    {"UserString", "UserString", "collections", "UserString"},
    {"__builtin__", "basestring", "builtins", "str"},
    {"__builtin__", "intern", "sys", "intern"},
    {"__builtin__", "long", "builtins", "int"},
    {"__builtin__", "reduce", "functools", "reduce"},
    {"__builtin__", "unichr", "builtins", "chr"},
    {"__builtin__", "unicode", "builtins", "str"},
    {"__builtin__", "xrange", "builtins", "range"},
    {"_multiprocessing", "Connection", "multiprocessing.connection", "Connection"},
    {"_socket", "fromfd", "socket", "fromfd"},
    {"exceptions", "StandardError", "builtins", "Exception"},
    {"itertools", "ifilter", "builtins", "filter"},
    {"itertools", "ifilterfalse", "itertools", "filterfalse"},
    {"itertools", "imap", "builtins", "map"},
    {"itertools", "izip", "builtins", "zip"},
    {"itertools", "izip_longest", "itertools", "zip_longest"},
    {"multiprocessing.forking", "Popen", "multiprocessing.popen_fork", "Popen"},
    {"multiprocessing.process", "Process", "multiprocessing.context", "Process"},
    {"socket", "_socketobject", "socket", "SocketType"},
    {"urllib", "ContentTooShortError", "urllib.error", "ContentTooShortError"},
    {"urllib", "getproxies", "urllib.request", "getproxies"},
    {"urllib", "pathname2url", "urllib.request", "pathname2url"},
    {"urllib", "quote", "urllib.parse", "quote"},
    {"urllib", "quote_plus", "urllib.parse", "quote_plus"},
    {"urllib", "unquote", "urllib.parse", "unquote"},
    {"urllib", "unquote_plus", "urllib.parse", "unquote_plus"},
    {"urllib", "url2pathname", "urllib.request", "url2pathname"},
    {"urllib", "urlcleanup", "urllib.request", "urlcleanup"},
    {"urllib", "urlencode", "urllib.parse", "urlencode"},
    {"urllib", "urlopen", "urllib.request", "urlopen"},
    {"urllib", "urlretrieve", "urllib.request", "urlretrieve"},
    {"urllib2", "HTTPError", "urllib.error", "HTTPError"},
    {"urllib2", "URLError", "urllib.error", "URLError"},
    {"whichdb", "whichdb", "dbm", "whichdb"},
};
// The rest of NAME_MAPPING: ("exceptions", E) -> ("builtins", E) for Python 2's exception
// names, and ("multiprocessing", E) -> ("multiprocessing.context", E) for four. Here
// "exceptions" maps to builtins for any name (a superset of Python's: stricter for the
// denylist, and no exception is on torch's allowlist either way).
constexpr std::string_view kMultiprocessingExceptions[] = {"AuthenticationError", "BufferTooShort",
                                                           "ProcessError", "TimeoutError"};

constexpr bool ImportMappingSorted() {
  return std::is_sorted(std::begin(kImportMapping), std::end(kImportMapping),
                        [](const auto& a, const auto& b) { return a.first < b.first; });
}
constexpr bool NameMappingSorted() {
  return std::is_sorted(std::begin(kNameMapping), std::end(kNameMapping),
                        [](const NameRename& a, const NameRename& b) {
                          return std::pair(a.module, a.name) < std::pair(b.module, b.name);
                        });
}
static_assert(ImportMappingSorted() && NameMappingSorted() && Sorted(kDeniedAttributes));

}  // namespace

std::pair<std::string, std::string> CompatPickleName(std::string_view module, std::string_view name,
                                                     uint32_t protocol) {
  if (protocol >= 3) return {std::string(module), std::string(name)};
  const auto rename = std::lower_bound(
      std::begin(kNameMapping), std::end(kNameMapping), std::pair(module, name),
      [](const NameRename& r, const auto& key) { return std::pair(r.module, r.name) < key; });
  if (rename != std::end(kNameMapping) && rename->module == module && rename->name == name) {
    return {std::string(rename->to_module), std::string(rename->to_name)};
  }
  if (module == "exceptions") return {"builtins", std::string(name)};
  if (module == "multiprocessing" && Holds(kMultiprocessingExceptions, name)) {
    return {"multiprocessing.context", std::string(name)};
  }
  const auto import =
      std::lower_bound(std::begin(kImportMapping), std::end(kImportMapping), module,
                       [](const auto& entry, std::string_view key) { return entry.first < key; });
  if (import != std::end(kImportMapping) && import->first == module) {
    return {std::string(import->second), std::string(name)};
  }
  return {std::string(module), std::string(name)};
}

bool IsDeniedPickleGlobal(std::string_view module, std::string_view name, uint32_t protocol) {
  if (DeniedPair(module, name)) return true;
  const auto [m, n] = CompatPickleName(module, name, protocol);
  return (m != module || n != name) && DeniedPair(m, n);
}

bool IsEnumMemberGetattr(std::string_view global, std::string_view attribute) {
  const bool capitals = !attribute.empty() && attribute[0] >= 'A' && attribute[0] <= 'Z' &&
                        std::all_of(attribute.begin(), attribute.end(), [](char c) {
                          return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
                        });
  const size_t dot = global.find('.');
  if (!capitals || dot == std::string_view::npos) return false;
  return !IsDeniedPickleGlobal(global.substr(0, dot),
                               std::string(global.substr(dot + 1)) + "." + std::string(attribute),
                               /*protocol=*/4);
}

}  // namespace ckptfs
