#!/usr/bin/env python3
"""Generates the client's driver-API tables from the CUDA toolkit's cuda.h.

  gen-driver-api.py CUDA_I CUDA_H OUT_STUBS OUT_TABLE OUT_ERRORS
  gen-driver-api.py --plain client|server CUDA_I CALLS OUT
  gen-driver-api.py --trace CUDA_I OUT


CUDA_I is cuda.h preprocessed with -D__CUDA_API_VERSION_INTERNAL, so every
exported name (cuMemAlloc, cuMemAlloc_v2, cuMemcpyHtoD_v2_ptds, ...) appears
once.  Outputs:
  - weak stubs for every entry point (the real implementations in the other
    files override them at link time): unimplemented calls return
    CUDA_ERROR_NOT_SUPPORTED and log their name once;
  - the name -> function table behind cuGetProcAddress;
  - cuGetErrorName / cuGetErrorString data from the cudaError_enum comments.
Generated at build time so a newer toolkit's new entry points are exported.

With --plain, the calls listed in CALLS (client/driver-api.calls) are
served generically: each argument gets a kind from its type in cuda.h
(value, stream/event/function/device handle, struct or scalar in, out or
in-out), and the output is either the client's entry points (each packs
its arguments for rc_plain_call, client/plain.c) or the server's table
(each entry unpacks them and calls the driver: daemon/ops_call.c).  A
call whose arguments fit none of the kinds stops the build, naming it.

With --trace, a wrapper for every entry point whose prototype it can read:
it calls the entry point and reports the call, its arguments (each as
the integer its first 8 bytes hold: values, handles, addresses) and its
result
(RGPU_TRACE, client/trace.c); cuGetProcAddress hands the wrappers out when
tracing is on.  The table runs parallel to the name table (same names, same
order); an entry without a wrapper is NULL.
"""
import re
import sys


def entry_points(cuda_i):
    text = open(cuda_i).read()
    return sorted(set(re.findall(r"\bCUresult\s+(cu\w+)\s*\(", text)))


def errors(cuda_h):
    text = open(cuda_h).read()
    m = re.search(r"typedef enum cudaError_enum \{(.*?)\} CUresult;", text, re.S)
    body = m.group(1)
    out = []
    # each enumerator is preceded by a /** ... */ comment
    for cm, name, val in re.findall(r"/\*\*(.*?)\*/\s*(CUDA_\w+)\s*=\s*(\d+)", body, re.S):
        doc = " ".join(l.strip().lstrip("*").strip() for l in cm.strip().splitlines())
        doc = re.sub(r"\\p |::|\\ref |\\b ", "", doc)
        sentence = re.split(r"(?<=[a-z0-9)])\. ", doc, 1)[0].rstrip(".")
        out.append((int(val), name, sentence))
    return out


def c_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


HANDLES = {"CUstream": "RGPU_ARG_STREAM", "CUevent": "RGPU_ARG_EVENT", "CUfunction": "RGPU_ARG_FUNC",
           "CUdevice": "RGPU_ARG_DEVICE"}
# by-value types that are not integers or enums
NOT_VALUES = re.compile(r"\b(CUcontext|CUmodule|CUlibrary|CUkernel|CUgraph|CUgraphExec|CUgraphNode|CUarray|CUtexObject|"
                        r"CUsurfObject|CUmemoryPool|CUlinkState|CUhostFn|CUstreamCallback|"
                        r"CUexternal\w*|CUipc\w*|CUuuid)\b")


def prototypes(cuda_i):
    text = re.sub(r"\s+", " ", open(cuda_i).read())
    protos = {}
    for m in re.finditer(r"\bCUresult (cu\w+) ?\(([^()]*)\);", text):
        protos[m.group(1)] = m.group(2).strip()
    return protos


def split_arg(a):
    """'const CUstreamAttrValue *value' -> ('const CUstreamAttrValue *', 'value')"""
    m = re.match(r"(.*?)(\w+)$", a.strip())
    return m.group(1).strip(), m.group(2)


def classify(name, args, notes):
    """[(kind, c type, arg name, size expression)] or raises ValueError."""
    out = []
    if args in ("void", ""):
        return out
    for a in args.split(","):
        t, n = split_arg(a)
        note = notes.get(n)
        base = t.replace("const", "").replace("*", "").strip()
        ptr = t.count("*")
        if note == "val":
            # a pointer that is a value: a device address (the same on
            # client and server)
            out.append(("RGPU_ARG_VAL", t, n, "0", None))
        elif note and note.split(":")[0] in ("in", "out"):
            parts = note.split(":")
            kind, size = parts[0], parts[1]
            # in:EXPR:MAX: EXPR bytes (from the other arguments, e.g. an
            # array of rank elements), at most MAX
            upto = parts[2] if len(parts) > 2 else None
            out.append(("RGPU_ARG_IN" if kind == "in" else "RGPU_ARG_OUT", t, n, size, upto))
        elif ptr == 0 and base in HANDLES:
            out.append((HANDLES[base], t, n, "0", None))
        elif ptr == 0 and not NOT_VALUES.search(base) and base not in ("void", "char"):
            out.append(("RGPU_ARG_VAL", t, n, "0", None))
        elif ptr == 1 and base not in ("void", "char") and not NOT_VALUES.search(base):
            kind = "RGPU_ARG_INOUT" if note == "inout" else "RGPU_ARG_IN" if t.startswith("const") else "RGPU_ARG_OUT"
            out.append((kind, t, n, "sizeof(%s)" % base, None))
        else:
            raise ValueError("%s: argument '%s %s' is not plain (annotate it or write the call by hand)"
                             % (name, t, n))
    return out


def read_calls(path):
    calls = []
    for line in open(path):
        line = line.split("#", 1)[0].split()
        if line:
            calls.append((line[0], dict(w.split("=", 1) for w in line[1:])))
    return calls


def plain(side, cuda_i, calls_path, out):
    protos = prototypes(cuda_i)
    entries = []
    for name, notes in read_calls(calls_path):
        if name not in protos:
            sys.exit("gen-driver-api.py: %s is not in cuda.h" % name)
        try:
            entries.append((name, protos[name], classify(name, protos[name], notes)))
        except ValueError as e:
            sys.exit("gen-driver-api.py: %s" % e)
    with open(out, "w") as f:
        f.write("/* Generated by gen-driver-api.py --plain %s from driver-api.calls: do not edit. */\n" % side)
        if side == "client":
            f.write('#include "client.h"\n#include "plain.h"\n\n')
            for name, proto, args in entries:
                f.write("RC_EXPORT CUresult %s(%s)\n{\n" % (name, proto))
                for kind, t, n, size, upto in args:
                    if name.endswith("_ptsz") and kind == "RGPU_ARG_STREAM":
                        f.write("\tif (!%s)\n\t\t%s = CU_STREAM_PER_THREAD;\n" % (n, n))
                    if upto:
                        # checked before anything is read from it
                        f.write("\tif ((uint64_t)(%s) > %s)\n\t\treturn CUDA_ERROR_INVALID_VALUE;\n"
                                % (size, upto))
                if args:
                    f.write("\tstruct rc_parg a[] = {\n")
                    for kind, t, n, size, upto in args:
                        if kind == "RGPU_ARG_VAL":
                            f.write("\t\t{ %s, NULL, (uint64_t)(%s)%s, 0 },\n"
                                    % (kind, "uintptr_t" if "*" in t else "uint64_t", n))
                        elif kind in ("RGPU_ARG_STREAM", "RGPU_ARG_EVENT", "RGPU_ARG_FUNC"):
                            f.write("\t\t{ %s, (void *)%s, 0, 0 },\n" % (kind, n))
                        elif kind == "RGPU_ARG_DEVICE":
                            f.write("\t\t{ %s, NULL, (uint64_t)%s, 0 },\n" % (kind, n))
                        else:
                            f.write("\t\t{ %s, (void *)%s, 0, (size_t)(%s) },\n" % (kind, n, size))
                    f.write("\t};\n")
                    f.write('\treturn rc_plain_call("%s", a, %d);\n}\n\n' % (name, len(args)))
                else:
                    f.write('\treturn rc_plain_call("%s", NULL, 0);\n}\n\n' % name)
        else:
            f.write('#include "ops_call.h"\n\n')
            for name, proto, args in entries:
                types = ", ".join(a[1] for a in args) or "void"
                f.write("static CUresult call_%s(void *fn, void **a)\n{\n" % name)
                if not args:
                    f.write("\t(void)a;\n")
                vals = []
                for i, (kind, t, n, size, upto) in enumerate(args):
                    if kind == "RGPU_ARG_VAL" and "*" in t:
                        vals.append("(%s)(uintptr_t)*(const uint64_t *)a[%d]" % (t, i))
                    elif kind == "RGPU_ARG_VAL" or kind == "RGPU_ARG_DEVICE":
                        vals.append("(%s)*(const uint64_t *)a[%d]" % (t, i))
                    elif kind in ("RGPU_ARG_STREAM", "RGPU_ARG_EVENT", "RGPU_ARG_FUNC"):
                        vals.append("(%s)*(void *const *)a[%d]" % (t, i))
                    else:
                        vals.append("(%s)a[%d]" % (t, i))
                f.write("\treturn ((CUresult (*)(%s))fn)(%s);\n}\n\n" % (types, ", ".join(vals)))
            f.write("struct call_desc call_descs[] = {\n")
            for name, proto, args in entries:
                kinds = ", ".join(a[0] for a in args) or "0"
                sizes = ", ".join(a[4] if a[4] else a[3] for a in args) or "0"
                upto = sum(1 << i for i, a in enumerate(args) if a[4])
                f.write('\t{ .name = "%s", .nargs = %d, .kind = { %s }, .size = { %s }, '
                        '.upto = 0x%x, .invoke = call_%s },\n'
                        % (name, len(args), kinds, sizes, upto, name))
            f.write("};\nconst int ncall_descs = %d;\n" % len(entries))


def trace(cuda_i, out):
    names = entry_points(cuda_i)
    protos = prototypes(cuda_i)
    with open(out, "w") as f:
        f.write("/* Generated by gen-driver-api.py from cuda.h: do not edit. */\n")
        f.write("#define __CUDA_API_VERSION_INTERNAL 1\n")
        f.write("#include <cuda.h>\n#include <cudaProfiler.h>\n")
        f.write('#include "procaddr.h"\n#include "trace.h"\n\n')
        wrapped = set()
        for n in names:
            args = protos.get(n)
            if args is None:
                continue
            if args in ("", "void"):
                params, call = "void", ""
            else:
                parts = [split_arg(a) for a in args.split(",")]
                if any(not t for t, _ in parts):
                    continue  # an unnamed parameter: no wrapper
                params = ", ".join("%s %s" % (t, a) if not t.endswith("*") else "%s%s" % (t, a)
                                   for t, a in parts)
                call = ", ".join(a for _, a in parts)
            names_ = [a for _, a in parts] if args not in ("", "void") else []
            f.write("static CUresult t_%s(%s)\n{\n" % (n, params))
            f.write("\tuint64_t t0_ = rc_trace_begin();\n")
            f.write("\tCUresult rc_ = %s(%s);\n" % (n, call))
            f.write('\tif (rc_trace_wants("%s", rc_)) {\n' % n)
            if names_:
                f.write("\t\tconst uint64_t v_[] = { %s };\n"
                        % ", ".join("RC_TRACE_V(%s)" % a for a in names_))
                f.write("\t\tstatic const char *const n_[] = { %s };\n"
                        % ", ".join('"%s"' % a for a in names_))
                f.write('\t\trc_trace_report("%s", rc_, t0_, n_, v_, %d);\n' % (n, len(names_)))
            else:
                f.write('\t\trc_trace_report("%s", rc_, t0_, NULL, NULL, 0);\n' % n)
            f.write("\t}\n\treturn rc_;\n}\n\n")
            wrapped.add(n)
        f.write("const struct rc_sym rc_trace_syms[] = {\n")
        for n in names:
            f.write('\t{ "%s", %s },\n' % (n, "(void *)t_" + n if n in wrapped else "NULL"))
        f.write("};\n")


def main():
    if sys.argv[1] == "--plain":
        plain(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
        return
    if sys.argv[1] == "--trace":
        trace(sys.argv[2], sys.argv[3])
        return
    cuda_i, cuda_h, out_stubs, out_table, out_errors = sys.argv[1:6]
    names = entry_points(cuda_i)
    with open(out_stubs, "w") as f:
        f.write("/* Generated by gen-driver-api.py from cuda.h: do not edit. */\n")
        f.write("void rc_unsupported(const char *name);\n")
        f.write("#define STUB(n) __attribute__((weak, visibility(\"default\"))) "
                "int n(void) { rc_unsupported(#n); return 801; /* CUDA_ERROR_NOT_SUPPORTED */ }\n")
        for n in names:
            f.write("STUB(%s)\n" % n)
    with open(out_table, "w") as f:
        f.write("/* Generated by gen-driver-api.py from cuda.h: do not edit. */\n")
        f.write('#include "procaddr.h"\n')
        for n in names:
            f.write("int %s(void);\n" % n)
        f.write("const struct rc_sym rc_syms[] = {\n")
        for n in names:
            f.write('\t{ "%s", (void *)%s },\n' % (n, n))
        f.write("};\nconst int rc_nsyms = %d;\n" % len(names))
    errs = errors(cuda_h)
    with open(out_errors, "w") as f:
        f.write("/* Generated by gen-driver-api.py from cuda.h: do not edit. */\n")
        f.write('#include "procaddr.h"\n')
        f.write("const struct rc_err rc_errs[] = {\n")
        for val, name, doc in errs:
            f.write("\t{ %d, %s, %s },\n" % (val, c_str(name), c_str(doc)))
        f.write("};\nconst int rc_nerrs = %d;\n" % len(errs))


if __name__ == "__main__":
    main()
