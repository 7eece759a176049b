/* The kernel driver's version ("580.159.04"), as NVIDIA's kernel module
 * states it in /proc/driver/nvidia/version; rgpud reports it to clients
 * so that rgpu's NVML answers with the servers' driver, not the CUDA
 * version (nvidia-smi compares them). */
#ifndef RGPU_NVRM_H
#define RGPU_NVRM_H

#include <stddef.h>

/* From the text of /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX
 * x86_64 Kernel Module  580.159.04  Release Build ..."): the version into
 * out; 0, or -1 (out empty) if the text holds none. */
int rgpu_nvrm_parse(const char *text, char *out, size_t n);
/* Reads it from this machine; 0, or -1 (out empty) without the module. */
int rgpu_nvrm_version(char *out, size_t n);

#endif
