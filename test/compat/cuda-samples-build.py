#!/usr/bin/env python3
"""Builds NVIDIA's cuda-samples that build headless on Linux, with plain nvcc.

  cuda-samples-build.py (--src DIR | --git GITDIR) --out DIR [--only REGEX]
                        [--jobs N] [--arch sm_90] [--tar FILE]
  cuda-samples-build.py --git GITDIR --out DIR --export-src FILE.tar.xz

--src: a cuda-samples checkout; --git: a git directory of one (files are
taken from HEAD one by one; files missing from a partial snapshot are
skipped).  Each sample's CMakeLists.txt names its executable, sources,
libraries and, for driver-API samples, the kernel it loads at run time
(built with -fatbin or -ptx next to the binary, under the name the sample
looks for).  Samples that need a display or a windowing library (OpenGL,
GLUT, EGL, X11, Vulkan), NvSci, MPI, FreeImage or LLVM are left out, as are
the platform-specific ones.  Default nvcc builds: static cudart, as users
build them.  Binaries are stripped.

Writes DIR/<sample>/ (binary, kernel files, the sample's data files) and
DIR/manifest.tsv (name, category, status, why); --tar packs DIR into one
tar.xz (what test/compat/cuda-samples.sh takes).  NVIDIA's code stays out of
the rgpu repository: DIR belongs in .devcarry/ (ignored by git).
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tarfile

SKIP_PACKAGES = ("OpenGL", "GLUT", "EGL", "X11", "Vulkan", "NVSCI", "MPI", "FreeImage", "LLVM",
                 "glfw", "GLEW")
SKIP_DIRS = ("8_Platform_Specific", "7_libNVVM")
SKIP_INCLUDES = re.compile(r'#\s*include\s*[<"](GL/|GLFW/|EGL/|vulkan|X11/|d3d|nvsci|mpi\.h|'
                           r'helper_gl\.h|cuda_gl_interop|FreeImage|cudla)')
LIBS = {
    "cublas": "-lcublas", "cublasLt": "-lcublasLt", "cufft": "-lcufft", "cufft_static": "-lcufft",
    "curand": "-lcurand", "cusparse": "-lcusparse", "cusolver": "-lcusolver", "nvrtc": "-lnvrtc",
    "nvJitLink": "-lnvJitLink", "nvjpeg": "-lnvjpeg", "nvml": "-lnvidia-ml", "cuda_driver": "-lcuda",
    "cudart": "", "cudart_static": "", "cudadevrt": "-lcudadevrt",
}
DATA_EXT = (".ppm", ".pgm", ".bmp", ".txt", ".dat", ".raw", ".bin", ".mtx", ".csv", ".pbm", ".png",
            ".jpg", ".yuv", ".avi", ".data", ".ptx", ".fatbin")
DATA_MAX = 4 << 20


class Tree:
    """Files of a checkout or of a git snapshot's HEAD."""

    def __init__(self, src=None, git=None):
        self.src, self.git = src, git
        if git:
            out = subprocess.run(["git", "--git-dir", git, "ls-tree", "-r", "-l", "HEAD"],
                                 capture_output=True, text=True, check=True).stdout
            self.files = {}
            for line in out.splitlines():
                meta, path = line.split("\t", 1)
                size = meta.split()[3]
                self.files[path] = int(size) if size.isdigit() else 0
        else:
            self.files = {}
            for root, _, names in os.walk(src):
                for n in names:
                    p = os.path.join(root, n)
                    self.files[os.path.relpath(p, src)] = os.path.getsize(p)

    def read(self, path):
        if self.git:
            r = subprocess.run(["git", "--git-dir", self.git, "show", "HEAD:" + path],
                               capture_output=True)
            return r.stdout if r.returncode == 0 else None
        try:
            with open(os.path.join(self.src, path), "rb") as f:
                return f.read()
        except OSError:
            return None

    def extract(self, path, dest):
        data = self.read(path)
        if data is None:
            return False
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as f:
            f.write(data)
        return True


def parse_cmake(text):
    """(executable, [sources], [libs], [(kernel source, output name, kind)], packages, rdc)"""
    text = re.sub(r"#[^\n]*", "", text)
    m = re.search(r"add_executable\(\s*(\S+)\s+([^)]*)\)", text)
    if not m:
        return None
    name = m.group(1)
    srcs = [s for s in m.group(2).split() if not s.startswith("$")]
    libs = sorted(set(re.findall(r"CUDA::(\w+)", text)))
    pkgs = set(re.findall(r"find_package\((\w+)", text))
    kernels = []
    ksrc = re.findall(r'set\(CUDA_KERNEL_SOURCE\s+"\$\{CMAKE_CURRENT_SOURCE_DIR\}/([^"]+)"\)', text)
    for kind in ("FATBIN", "PTX"):
        outs = re.findall(r'set\(CUDA_%s_FILE\s+"\$\{CMAKE_CURRENT_BINARY_DIR\}/([^"]+)"\)' % kind, text)
        for i, o in enumerate(outs):
            if ksrc:
                kernels.append((ksrc[min(i, len(ksrc) - 1)], o, kind.lower()))
    rdc = "CUDA_SEPARABLE_COMPILATION ON" in text
    return name, srcs, libs, kernels, pkgs, rdc


def build_one(tree, sdir, out, arch, common, nvcc):
    """Returns (name, category, status, why)."""
    cat = sdir.split("/")[1]
    cm = tree.read(sdir + "/CMakeLists.txt")
    p = parse_cmake(cm.decode(errors="replace")) if cm else None
    base = os.path.basename(sdir)
    if not p:
        return (base, cat, "skip", "no executable in CMakeLists.txt")
    name, srcs, libs, kernels, pkgs, rdc = p
    bad = [k for k in pkgs if k in SKIP_PACKAGES]
    if bad:
        return (name, cat, "skip", "needs " + ",".join(sorted(bad)))
    dest = os.path.join(out, name)
    work = os.path.join(out, ".src", name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work, exist_ok=True)
    missing = []
    for path, size in tree.files.items():
        if not path.startswith(sdir + "/") or "/.vscode/" in path:
            continue
        rel = path[len(sdir) + 1:]
        if (rel.endswith(DATA_EXT) or "/" in rel) and size > DATA_MAX:
            continue
        if not tree.extract(path, os.path.join(work, rel)):
            missing.append(rel)
    for s in srcs:
        if not os.path.exists(os.path.join(work, s)):
            return (name, cat, "skip", "source missing from the snapshot: " + s)
    for s in srcs:
        with open(os.path.join(work, s), errors="replace") as f:
            if SKIP_INCLUDES.search(f.read()):
                return (name, cat, "skip", "includes a display/windowing header")
    os.makedirs(dest, exist_ok=True)
    flags = ["-arch=" + arch, "-O2", "-std=c++17", "-I" + common, "-I" + work, "-w",
             "-Xlinker", "-s", "-L/usr/local/cuda/lib64/stubs"]
    if rdc:
        flags += ["-rdc=true"]
    if "OpenMP" in pkgs:
        flags += ["-Xcompiler", "-fopenmp"]
    lib = ["-lcuda", "-lcudadevrt"]
    for l in libs:
        if l.startswith("npp"):
            lib.append("-l" + l)
        elif l in LIBS:
            if LIBS[l]:
                lib.append(LIBS[l])
        else:
            return (name, cat, "skip", "library CUDA::" + l)
    if "cusolver" in libs:
        lib += ["-lcublas", "-lcusparse"]
    if "OpenMP" in pkgs:
        lib.append("-lgomp")
    cmd = [nvcc] + flags + [os.path.join(work, s) for s in srcs] + ["-o", os.path.join(dest, name)] + lib
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        err = (r.stderr.strip().splitlines() or ["?"])[-1][:200]
        return (name, cat, "fail", "build: " + err)
    for ksrc, kout, kind in kernels:
        karch = ["-arch=" + arch] if kind == "fatbin" else ["-arch=compute_" + arch.split("_")[1]]
        kcmd = [nvcc] + karch + ["-I" + common, "-I" + work, "-w", "-" + kind,
                                 os.path.join(work, ksrc), "-o", os.path.join(dest, kout)]
        r = subprocess.run(kcmd, capture_output=True, text=True)
        if r.returncode != 0:
            return (name, cat, "fail", "kernel build: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200])
    # data the sample reads: next to the binary, and in ./data (NVRTC
    # samples compile their kernel source at run time)
    ext = DATA_EXT + ((".cu", ".cuh", ".h") if "nvrtc" in libs else ())
    for root, _, names in os.walk(work):
        for n in names:
            if n.endswith(ext) and n != "CMakeLists.txt":
                src = os.path.join(root, n)
                rel = os.path.relpath(src, work)
                d = os.path.join(dest, rel)
                os.makedirs(os.path.dirname(d), exist_ok=True)
                shutil.copy(src, d)
                if not rel.startswith("data/"):
                    os.makedirs(os.path.join(dest, "data"), exist_ok=True)
                    shutil.copy(src, os.path.join(dest, "data", n))
    shutil.rmtree(work, ignore_errors=True)
    return (name, cat, "built", "missing from snapshot: " + ",".join(missing[:3]) if missing else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src")
    ap.add_argument("--git")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--tar")
    ap.add_argument("--export-src", help="write the sources (Common/, Samples/ but the skipped "
                    "categories, files up to --max-file bytes) to this tar.xz and stop")
    ap.add_argument("--max-file", type=int, default=512 << 10)
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc"))
    a = ap.parse_args()
    if not a.src and not a.git:
        sys.exit("cuda-samples-build.py: --src or --git is needed")
    tree = Tree(a.src, a.git)
    if a.export_src:
        os.makedirs(os.path.dirname(os.path.abspath(a.export_src)), exist_ok=True)
        with tarfile.open(a.export_src, "w:xz", preset=6) as t:
            for path, size in sorted(tree.files.items()):
                top = path.split("/")
                if size > a.max_file or top[0] not in ("Common", "Samples") or \
                        (top[0] == "Samples" and len(top) > 1 and top[1] in SKIP_DIRS):
                    continue
                data = tree.read(path)
                if data is None:
                    continue
                info = tarfile.TarInfo("cuda-samples-src/" + path)
                info.size = len(data)
                info.mode = 0o644
                import io
                t.addfile(info, io.BytesIO(data))
        print("sources in %s (%d bytes)" % (a.export_src, os.path.getsize(a.export_src)))
        return
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    common = os.path.join(out, ".src", "Common")
    for path in tree.files:
        if path.startswith("Common/") and tree.files[path] <= DATA_MAX:
            tree.extract(path, os.path.join(out, ".src", path))
    dirs = sorted({os.path.dirname(p) for p in tree.files
                   if p.startswith("Samples/") and p.endswith("/CMakeLists.txt") and p.count("/") == 3})
    dirs = [d for d in dirs if d.split("/")[1] not in SKIP_DIRS and re.search(a.only, d)]
    rows = []
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for row in ex.map(lambda d: build_one(tree, d, out, a.arch, common, a.nvcc), dirs):
            rows.append(row)
            print("%-40s %-26s %-6s %s" % row, flush=True)
    shutil.rmtree(os.path.join(out, ".src"), ignore_errors=True)
    for r in rows:
        if r[2] != "built":
            shutil.rmtree(os.path.join(out, r[0]), ignore_errors=True)
    with open(os.path.join(out, "manifest.tsv"), "w") as f:
        for r in rows:
            f.write("\t".join(r) + "\n")
    n = sum(r[2] == "built" for r in rows)
    print("built %d of %d samples" % (n, len(rows)))
    if a.tar:
        os.makedirs(os.path.dirname(os.path.abspath(a.tar)), exist_ok=True)
        with tarfile.open(a.tar, "w:xz", preset=9) as t:
            t.add(out, arcname="cuda-samples")
        print("packed %s (%d bytes)" % (a.tar, os.path.getsize(a.tar)))


if __name__ == "__main__":
    main()
