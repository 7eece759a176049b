#!/usr/bin/env python3
"""NVLink as the libnvidia-ml.so.1 first on the library path reports it,
the way NCCL asks (capability, state by call and by field value, the far
end's bus id and type): one LINK line per active link, "gpu link busid
farbusid type p2p", and the calls that failed."""
import ctypes

nv = ctypes.CDLL("libnvidia-ml.so.1")


class Pci(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                ("bus", ctypes.c_uint), ("device", ctypes.c_uint),
                ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class Field(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint),
                ("timestamp", ctypes.c_longlong), ("latencyUsec", ctypes.c_longlong),
                ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", ctypes.c_ulonglong)]


assert nv.nvmlInit_v2() == 0, "nvmlInit_v2 failed"
n = ctypes.c_uint()
nv.nvmlDeviceGetCount_v2(ctypes.byref(n))
fails = {}
for i in range(n.value):
    h = ctypes.c_void_p()
    nv.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
    me = Pci()
    nv.nvmlDeviceGetPciInfo_v3(h, ctypes.byref(me))
    for l in range(18):
        cap = ctypes.c_uint(9)
        r = nv.nvmlDeviceGetNvLinkCapability(h, l, 0, ctypes.byref(cap))
        if r:
            fails.setdefault("capability %d" % r, 0)
            fails["capability %d" % r] += 1
            continue
        st = ctypes.c_int(-1)
        r1 = nv.nvmlDeviceGetNvLinkState(h, l, ctypes.byref(st))
        f = Field(165, l)
        r2 = nv.nvmlDeviceGetFieldValues(h, 1, ctypes.byref(f))
        if r1 or r2 or f.nvmlReturn:
            k = "state %d/%d/%d" % (r1, r2, f.nvmlReturn)
            fails[k] = fails.get(k, 0) + 1
        if st.value != 1 or (f.value & 0xffffffff) != 1 or not cap.value:
            continue
        far = Pci()
        r3 = nv.nvmlDeviceGetNvLinkRemotePciInfo(h, l, ctypes.byref(far))  # (NCCL's name)
        t = ctypes.c_int(-1)
        r4 = nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, l, ctypes.byref(t))
        if r3 or r4:
            k = "remote %d/%d" % (r3, r4)
            fails[k] = fails.get(k, 0) + 1
            continue
        print("LINK %d %d %s %s %d %d" % (i, l, me.busId.decode().lower(),
                                         far.busId.decode().lower(), t.value, cap.value))
print("FAILS", fails or "none")
