"""Static safety check of LLM-written kernel files, before anything is compiled or run.

LLM code is untrusted and is built and run on the user's machine, so a candidate must be nothing but a
kernel file. The rules (RULES below is also what the coding prompt shows the model):

1. Includes: only the allow-listed CUDA / C++ headers that do no I/O (`<...>`), "astra_abi.h" and
   "astra_device.cuh".
   No relative or absolute paths, no computed includes, no #include_next / #import / #embed.
2. Preprocessor: no token pasting (##), no _Pragma; #pragma only unroll / nounroll / once.
3. No file, process, network, environment, thread, signal, dynamic-loading or console-output calls
   (fopen, std::ifstream, system, popen, exec*, fork, socket, getenv, dlopen, printf, ...), no
   CUDA driver API (cu*), no syscalls or .incbin in inline asm, no non-ASCII or \\u escapes in code.
4. CUDA runtime: only the listed runtime calls (error queries, function attributes, occupancy,
   device attributes, cudaLaunchKernel*/cudaMemsetAsync); no streams, events, graphs, allocation,
   copies or synchronization; every <<<...>>> launch names the caller's stream (4th argument).
5. Host code: the only exported symbol is the C-ABI entry astra_launch (ASTRA_ENTRY), defined once;
   any other host-callable function at namespace scope is internal: static, inline, constexpr, a
   template, or in an anonymous namespace. No extern "C" blocks, visibility/dllexport attributes or
   load-time constructors.
"""
from __future__ import annotations

import re

from astra_sglang.errors import AstraError
from astra_sglang.harness.build import HEADERS

QUOTED = " and ".join(f'"{h}"' for h in HEADERS)
RULES = __doc__.split("kernel file. The rules", 1)[1].split(":", 1)[1].strip()
MAX_BYTES = 256 * 1024

ALLOWED_HEADERS = {
    "cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "vector_types.h", "mma.h", "cuda_pipeline.h",
    "math_constants.h", "cooperative_groups.h", "stdint.h", "cstdint", "stddef.h", "cstddef", "cmath", "math.h",
    "float.h", "cfloat", "limits.h", "climits", "limits", "type_traits", "utility", "algorithm", "array",
    "cuda/barrier", "cuda/pipeline", "cuda/std/cstdint", "cuda/std/type_traits", "cuda/std/limits",
    "cuda/std/utility", "cuda/std/array",
}
ALLOWED_HEADER_DIRS = ("cub/", "cooperative_groups/")
ALLOWED_PRAGMAS = {"unroll", "nounroll", "once"}
ALLOWED_DIRECTIVES = {"include", "pragma", "define", "undef", "if", "ifdef", "ifndef", "elif", "else", "endif",
                      "error", "warning", "line"}
ALLOWED_RUNTIME = {
    "cudaGetLastError", "cudaPeekAtLastError", "cudaGetErrorString", "cudaGetErrorName", "cudaFuncSetAttribute",
    "cudaFuncGetAttributes", "cudaFuncSetCacheConfig", "cudaGetDevice", "cudaDeviceGetAttribute",
    "cudaGetDeviceProperties", "cudaLaunchKernel", "cudaLaunchKernelEx", "cudaLaunchCooperativeKernel",
    "cudaMemsetAsync", "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cudaOccupancyMaxPotentialBlockSize",
    "cudaOccupancyAvailableDynamicSMemPerBlock",
}
_IO = ("fopen fdopen freopen fclose tmpfile tmpnam fwrite fread fputs fgets fputc fgetc fprintf fscanf printf "
       "vprintf puts putchar perror scanf ifstream ofstream fstream filebuf filesystem cout cerr clog cin "
       "opendir readdir unlink unlinkat rmdir mkdir chmod chown symlink truncate ftruncate chdir getcwd")
_PROC = ("popen pclose execl execlp execle execv execvp execvpe execve fexecve posix_spawn posix_spawnp fork vfork "
         "ptrace atexit at_quick_exit quick_exit _exit _Exit longjmp setjmp sigaction pthread_create")
_NET = "socket socketpair getaddrinfo gethostbyname"
_ENV = "getenv secure_getenv setenv unsetenv putenv environ"
_DL = "dlopen dlsym dlclose dlmopen dlvsym LoadLibrary LoadLibraryA LoadLibraryW GetProcAddress syscall mmap mprotect"
_WORDS = {w: kind for kind, words in (("file/console I/O", _IO), ("process control", _PROC), ("networking", _NET),
                                      ("environment access", _ENV), ("dynamic loading / syscalls", _DL))
          for w in words.split()}
_CALLS = {w: "process / file / network call" for w in
          "system open openat creat read write close remove rename kill raise signal exit abort connect bind "
          "listen accept send recv sendto recvfrom".split()}
_RUNTIME_BANNED = re.compile(r"\bcuda(Stream(?!_t\b)\w*|Malloc\w*|Free\w*|Memcpy\w*|HostAlloc|HostRegister|Event\w*|"
                             r"Graph\w*|Ipc\w*|MemPool\w*|LaunchHostFunc|DeviceSynchronize|DeviceReset|SetDevice|"
                             r"ThreadSynchronize|Profiler\w*|DeviceSetLimit)\b")
_ASM_BAD = re.compile(r"syscall|sysenter|int\s*\$?0x80|\bsvc\b|vmcall|\.incbin", re.I)
_FUNC_TAIL = re.compile(r"\)\s*(?:const|noexcept|override|final|volatile|&&?|->\s*[\w:<>,\s*&]+|"
                        r"__attribute__\s*\(\(.*?\)\)|__launch_bounds__\s*\([^)]*\)|\s)*$", re.S)
_INTERNAL = re.compile(r"\b(static|inline|__forceinline__|__inline__|constexpr|template|__global__)\b")


class UnsafeCode(AstraError):
    """The candidate breaks a safety rule; the message (all reasons) is fed back to the coding agent."""

    def __init__(self, reasons: list[str]):
        self.reasons = reasons
        super().__init__("the kernel file was rejected before building: " + "; ".join(reasons))


def _strip(src: str) -> tuple[str, str, list[str]]:
    """(code without comments, the same with string/char literal contents blanked, problems)."""
    code, bare, problems, i, n = [], [], [], 0, len(src)
    while i < n:
        c, two = src[i], src[i:i + 2]
        if two == "//":
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif two == "/*":
            j = src.find("*/", i + 2)
            chunk = src[i:n if j < 0 else j + 2]
            code.append("\n" * chunk.count("\n") or " ")
            bare.append("\n" * chunk.count("\n") or " ")
            i = n if j < 0 else j + 2
        elif c in "\"'":
            if c == '"' and i > 0 and src[i - 1] == "R" and re.match(r'"[^(\s]*\(', src[i:]):
                problems.append("raw string literals are not allowed")
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            code.append(src[i:j + 1])
            bare.append(c + " " * max(0, j - i - 1) + c)
            i = j + 1
        else:
            code.append(c)
            bare.append(c)
            i += 1
    return "".join(code), "".join(bare), problems


def _line(text: str, pos: int) -> str:
    return f"line {text.count(chr(10), 0, pos) + 1}"


def _directives(code: str, bare: str) -> list[str]:
    out = []
    for m in re.finditer(r"^[ \t]*(#|%:)[ \t]*(\w*)(.*)$", code, re.M):
        where, name, rest = _line(code, m.start()), m.group(2), m.group(3).strip()
        if m.group(1) == "%:" or name not in ALLOWED_DIRECTIVES:
            out.append(f"{where}: preprocessor directive #{name} is not allowed")
        elif name == "include":
            inc = re.fullmatch(r'<([^>]+)>|"([^"]+)"', rest)
            if inc is None:
                out.append(f"{where}: computed #include {rest!r} is not allowed")
            elif inc.group(2) is not None and inc.group(2) not in HEADERS:
                out.append(f'{where}: #include "{inc.group(2)}": the only quoted includes allowed are {QUOTED}')
            elif inc.group(1) is not None:
                header = inc.group(1)
                ok = header in ALLOWED_HEADERS or (header.startswith(ALLOWED_HEADER_DIRS) and ".." not in header)
                if not ok:
                    out.append(f"{where}: #include <{header}> is not on the allow-list of I/O-free CUDA/C++ headers")
        elif name == "pragma" and (pragma := (re.match(r"\w*", rest).group(0))) not in ALLOWED_PRAGMAS:
            out.append(f"{where}: #pragma {pragma} is not allowed (only unroll, nounroll, once)")
    for m in re.finditer(r"##|\b_Pragma\b", bare):
        out.append(f"{_line(bare, m.start())}: {m.group(0)} is not allowed (token pasting / _Pragma can hide names)")
    return out


def _names(code: str, bare: str) -> list[str]:
    out = []
    for m in re.finditer(r"\b[A-Za-z_]\w*\b", bare):
        word, where = m.group(0), _line(bare, m.start())
        if word in _WORDS:
            out.append(f"{where}: {word} ({_WORDS[word]}) is not allowed in a kernel file")
        elif word in _CALLS and not re.search(r"(\.|->)\s*$", bare[max(0, m.start() - 16):m.start()]):
            # any use, not only calls: `#define S system` or `auto f = &system;` would hide the call
            out.append(f"{where}: {word} names a process / file / network call: not allowed in a kernel file "
                       "(rename it if it is your own identifier)")
        elif word.startswith("pthread_") or (re.fullmatch(r"cu[A-Z]\w*", word)):
            out.append(f"{where}: {word} (threads / CUDA driver API) is not allowed")
    for m in _RUNTIME_BANNED.finditer(bare):
        out.append(f"{_line(bare, m.start())}: {m.group(0)} is not allowed: use only the caller's stream, no "
                   "allocation, copies, events, graphs or synchronization")
    for m in re.finditer(r"\b(cuda[A-Z]\w*)\s*\(", bare):
        if m.group(1) not in ALLOWED_RUNTIME and not _RUNTIME_BANNED.fullmatch(m.group(1)):
            out.append(f"{_line(bare, m.start())}: CUDA runtime call {m.group(1)}() is not on the allow-list")
    for m in re.finditer(r"\bstd\s*::\s*(thread|jthread|async|system|getenv)\b", bare):
        out.append(f"{_line(bare, m.start())}: std::{m.group(1)} is not allowed")
    for m in re.finditer(r"\b(asm|__asm__|__asm)\b", code):
        body = code[m.end():m.end() + 2000].split(";", 1)[0]
        if _ASM_BAD.search(body):
            out.append(f"{_line(code, m.start())}: inline asm with syscalls / .incbin is not allowed")
    if re.search(r"incbin", code):
        out.append(".incbin is not allowed")
    for m in re.finditer(r"[^\x00-\x7f]|\\[uU][0-9a-fA-F]{4}", bare):
        out.append(f"{_line(bare, m.start())}: non-ASCII characters or \\u escapes are not allowed outside "
                   "strings and comments")
        break
    for m in re.finditer(r"\b(constructor|destructor|init_priority|visibility|dllexport|__declspec)\b", bare):
        out.append(f"{_line(bare, m.start())}: attribute {m.group(1)} is not allowed (the ABI macro exports the entry)")
    for m in re.finditer(r'\bextern\s*"C"', code):
        tail = re.split(r"[{;]", code[m.end():], maxsplit=1)[0]
        if "astra_launch" not in tail:
            out.append(f'{_line(code, m.start())}: extern "C" is only allowed on astra_launch')
    return out


def _launches(bare: str) -> list[str]:
    out = []
    for m in re.finditer(r"<<<(.*?)>>>", bare, re.S):
        parts, depth, cur = [], 0, ""
        for ch in m.group(1):
            depth += ch in "([{"
            depth -= ch in ")]}"
            if ch == "," and depth == 0:
                parts.append(cur.strip())
                cur = ""
            else:
                cur += ch
        parts.append(cur.strip())
        if len(parts) != 4 or parts[3] in ("0", "nullptr", "NULL", "cudaStreamLegacy", "cudaStreamPerThread", "0L"):
            out.append(f"{_line(bare, m.start())}: kernel launch <<<{m.group(1).strip()}>>> must pass the caller's "
                       "stream as its 4th argument (<<<grid, block, smem, stream>>>)")
    return out


def _host_functions(bare: str) -> list[str]:
    """Namespace-scope function definitions: only the entry may be exported (see rule 5)."""
    text = re.sub(r"^[ \t]*#.*$", "", bare, flags=re.M)
    out, entries, scopes, header, i = [], 0, [], "", 0
    while i < len(text):
        ch = text[i]
        if ch == ";":
            header = ""
        elif ch == "}":
            if scopes:
                scopes.pop()
            header = ""
        elif ch == "{":
            head = header.strip()
            ns = re.search(r"\bnamespace\s*(\w*)\s*$", head)
            if ns:
                scopes.append("anon" if not ns.group(1) else "ns")
                header, i = "", i + 1
                continue
            # astra_launch_cfg<...> (the tuner's knob template) is a helper, not a second entry
            if head.endswith("ASTRA_ENTRY") or (re.search(r"\bastra_launch\s*\(", head) and _FUNC_TAIL.search(head)):
                entries += 1
            elif "(" in head and _FUNC_TAIL.search(head) and not re.match(r"(struct|class|union|enum)\b", head) \
                    and "=" not in head.split("(", 1)[0] and "anon" not in scopes:
                device_only = "__device__" in head and "__host__" not in head
                if not device_only and not _INTERNAL.search(head):
                    name = re.findall(r"(\w+)\s*\(", head)
                    out.append(f"{_line(text, i)}: host function {name[0] if name else '?'}() must be static "
                               "(only astra_launch is exported)")
            j, depth = i, 0  # skip the whole body
            while j < len(text):
                depth += text[j] == "{"
                depth -= text[j] == "}"
                if depth == 0:
                    break
                j += 1
            header, i = "", j + 1
            continue
        else:
            header += ch
        i += 1
    if entries != 1:
        out.append(f"the file must define the entry ASTRA_ENTRY {{ ... }} exactly once (found {entries})")
    return out


def check_source(source: str) -> list[str]:
    """Every rule the source breaks, as reasons for the model; empty = safe to build."""
    if len(source.encode()) > MAX_BYTES:
        return [f"the file is larger than {MAX_BYTES // 1024} KiB"]
    spliced = re.sub(r"\\\r?\n", "", source)
    code, bare, problems = _strip(spliced)
    reasons = problems + _directives(code, bare) + _names(code, bare) + _launches(bare) + _host_functions(bare)
    return list(dict.fromkeys(reasons))


def ensure_safe(source: str) -> None:
    reasons = check_source(source)
    if reasons:
        raise UnsafeCode(reasons)
